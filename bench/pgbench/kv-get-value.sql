-- KV get of a value of the run's size (1,000 keys in ns vs): the SQL twin of
-- POST /api/v1/kv {operations:[{op:get}]} in the value-size scaling run
-- (statements/kv_get.sql).
\set k random(1, 1000)
SELECT value::text, version, queen.iso(expires_at), queen.iso(updated_at)
  FROM queen.kv
 WHERE ns = 'vs' AND key = 'k:' || :k AND (expires_at IS NULL OR expires_at > now());
