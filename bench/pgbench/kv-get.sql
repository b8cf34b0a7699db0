-- KV get: the SQL twin of POST /api/v1/kv {operations:[{op:get}]}: the
-- engine's statement for one get (statements/kv_get.sql).
\set k random(1, 10000)
SELECT value::text, version, queen.iso(expires_at), queen.iso(updated_at)
  FROM queen.kv
 WHERE ns = 'bench' AND key = 'k:' || :k AND (expires_at IS NULL OR expires_at > now());
