-- KV getPrefix, a 100-row page at a random start in a namespace of :n keys
-- (-D ns=p1k -D n=1000, and so on): the SQL twin of
-- POST /api/v1/kv {operations:[{op:getPrefix, limit:100}]} (statements/kv_get_prefix.sql).
\set s random(0, :n - 101)
SELECT queen.kv_get_prefix(:ns::text, 'k:', 'k:' || lpad(:s::text, 7, '0'), 100, false, 4194304)::text;
