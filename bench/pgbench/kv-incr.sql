-- KV incr: the SQL twin of POST /api/v1/kv {operations:[{op:incr}]}
-- (statements/kv_incr.sql: ns, key, delta, min, max, ttlSeconds, forever).
\set k random(1, 10000)
SELECT queen.kv_incr('bench', 'c:' || :k, 1::numeric, NULL, NULL, NULL, true)::text;
