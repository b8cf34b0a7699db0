-- KV gets of a batch (batch.rs): the live row of each (ns, key); the fifth column is the member's
-- position. $3 bounds the answer in bytes: a row whose value would start past it comes back
-- without its value and with `included` false (the sixth column), and is asked again in the
-- next statement; the first row is always included, so every statement answers one at least.
SELECT CASE WHEN s.before < $3 OR s.first THEN s.value END, s.version, s.expires, s.updated, s.n,
       s.before < $3 OR s.first
  FROM (SELECT k.value::text AS value, k.version, queen.iso(k.expires_at) AS expires,
               queen.iso(k.updated_at) AS updated, u.n,
               coalesce(sum(octet_length(k.value::text)) OVER w, 0) AS before,
               row_number() OVER (ORDER BY u.n) = 1 AS first
          FROM unnest($1::text[], $2::text[]) WITH ORDINALITY u(ns, key, n)
          JOIN queen.kv k ON k.ns = u.ns AND k.key = u.key AND (k.expires_at IS NULL OR k.expires_at > now())
        WINDOW w AS (ORDER BY u.n ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)) s
