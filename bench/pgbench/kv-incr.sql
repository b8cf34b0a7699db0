-- KV incr: the SQL twin of POST /api/v1/kv {operations:[{op:incr}]}.
\set k random(1, 10000)
SELECT queen.kv_batch(('{"operations":[{"op":"incr","ns":"bench","key":"c:' || :k || '","delta":1,"forever": true}]}')::json,
                      '{"maxReadBytes":4194304}'::jsonb);
