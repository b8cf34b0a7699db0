-- KV putIfAbsent on a new key: the SQL twin of POST /api/v1/kv
-- {operations:[{op:putIfAbsent}]} (statements/kv_put.sql with expect 0).
\set k random(1, 9000000000000000000)
SELECT queen.kv_put('bench', 'n:' || :k, '1'::jsonb, 3600, NULL, 0)::text;
