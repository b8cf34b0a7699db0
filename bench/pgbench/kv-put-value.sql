-- KV put of a string value of the run's size (-D value=<letters>, sent as a
-- parameter like our HTTP body carries it): the SQL twin of
-- POST /api/v1/kv {operations:[{op:put}]} in the value-size scaling run.
-- (No ':' right before a word inside the literals: pgbench takes ':word'
-- for a variable even there.)
\set k random(1, 1000)
SELECT queen.kv_batch(('{"operations":[{"op":"put","ns":"vs","key":"k:' || :k || '","value":"' || :value::text
                       || '","forever": true}]}')::json,
                      '{"maxReadBytes":4194304}'::jsonb);
