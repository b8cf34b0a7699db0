-- KV getPrefix, a 100-row page at a random start in a namespace of :n keys
-- (-D ns=p1k -D n=1000, and so on): the SQL twin of
-- POST /api/v1/kv {operations:[{op:getPrefix, limit:100}]}.
\set s random(0, :n - 101)
SELECT queen.kv_batch(('{"operations":[{"op":"getPrefix","ns":"' || :ns::text || '","prefix":"k:","after":"k:'
                       || lpad(:s::text, 7, '0') || '","limit":100}]}')::json,
                      '{"maxReadBytes":4194304}'::jsonb);
