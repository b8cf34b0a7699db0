-- KV single-op writes of a batch (batch.rs): the sixteen typed arrays of kv_apply.sql, one element per member.
SELECT queen.kv_write_rows($1::text[], $2::text[], $3::text[], $4::text[]::jsonb[], $5::bigint[], $6::boolean[],
                           $7::bigint[], $8::boolean[], $9::text[]::numeric[], $10::text[]::numeric[],
                           $11::text[]::numeric[], $12::text[]::jsonb[], $13::text[], $14::text[], $15::integer[],
                           $16::boolean[])
