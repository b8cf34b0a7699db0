-- KV single-op writes of a batch (batch.rs): op, ns, key, value, ttlSeconds, forever, expect, delta, min, max.
SELECT queen.kv_write_rows($1::text[], $2::text[], $3::text[], $4::text[]::jsonb[], $5::bigint[], $6::boolean[],
                           $7::bigint[], $8::text[]::numeric[], $9::text[]::numeric[], $10::text[]::numeric[])
