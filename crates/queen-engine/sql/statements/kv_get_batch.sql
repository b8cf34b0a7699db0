-- KV gets of a batch (batch.rs): the live row of each (ns, key); the fifth column is the member's position.
SELECT k.value::text, k.version, queen.iso(k.expires_at), queen.iso(k.updated_at), u.n
  FROM unnest($1::text[], $2::text[]) WITH ORDINALITY u(ns, key, n)
  JOIN queen.kv k ON k.ns = u.ns AND k.key = u.key AND (k.expires_at IS NULL OR k.expires_at > now())
