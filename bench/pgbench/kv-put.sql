-- KV put (upsert): the SQL twin of POST /api/v1/kv {operations:[{op:put}]}
-- (statements/kv_put.sql: ns, key, value, ttlSeconds, forever, expect).
\set k random(1, 10000)
SELECT queen.kv_put('bench', 'k:' || :k, (:k::text)::jsonb, NULL, true, NULL)::text;
