-- KV incr: ns, key, delta, min, max (integers as text, numeric in SQL), ttlSeconds, forever.
SELECT queen.kv_incr($1, $2, $3::text::numeric, $4::text::numeric, $5::text::numeric, $6, $7)::text
