-- KV getPrefix, a 100-row page in a namespace of 1k keys: the SQL twin of
-- POST /api/v1/kv {operations:[{op:getPrefix, limit:100}]}.
\set s random(0, 899)
SELECT queen.kv_batch(('{"operations":[{"op":"getPrefix","ns":"p1k","prefix":"k:","after":"k:' || lpad(:s::text, 7, '0') || '","limit":100}]}')::json,
                      '{"maxReadBytes":4194304}'::jsonb);
