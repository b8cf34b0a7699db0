-- KV put of a string value of the run's size (-D value=<letters>, sent as a
-- parameter like our HTTP body carries it): the SQL twin of
-- POST /api/v1/kv {operations:[{op:put}]} in the value-size scaling run
-- (statements/kv_put.sql).
\set k random(1, 1000)
SELECT queen.kv_put('vs', 'k:' || :k, ('"' || :value::text || '"')::jsonb, NULL, true, NULL)::text;
