-- KV get of a value of the run's size (1,000 keys in ns vs): the SQL twin of
-- POST /api/v1/kv {operations:[{op:get}]} in the value-size scaling run.
\set k random(1, 1000)
SELECT queen.kv_batch(('{"operations":[{"op":"get","ns":"vs","key":"k:' || :k || '"}]}')::json,
                      '{"maxReadBytes":4194304}'::jsonb);
