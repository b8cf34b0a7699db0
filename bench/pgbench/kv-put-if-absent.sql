-- KV putIfAbsent on a new key: the SQL twin of POST /api/v1/kv {operations:[{op:putIfAbsent}]}.
\set k random(1, 9000000000000000000)
SELECT queen.kv_batch(('{"operations":[{"op":"putIfAbsent","ns":"bench","key":"n:' || :k || '","value":1,"ttlSeconds":3600}]}')::json,
                      '{"maxReadBytes":4194304}'::jsonb);
