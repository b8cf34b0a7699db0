-- KV put (upsert): the SQL twin of POST /api/v1/kv {operations:[{op:put}]}.
\set k random(1, 10000)
SELECT queen.kv_batch(('{"operations":[{"op":"put","ns":"bench","key":"k:' || :k || '","value":' || :k || ',"forever": true}]}')::json,
                      '{"maxReadBytes":4194304}'::jsonb);
