-- KV get: the SQL twin of POST /api/v1/kv {operations:[{op:get}]}.
\set k random(1, 10000)
SELECT queen.kv_batch(('{"operations":[{"op":"get","ns":"bench","key":"k:' || :k || '"}]}')::json,
                      '{"maxReadBytes":4194304}'::jsonb);
