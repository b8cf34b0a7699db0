-- Engine::kv with several ops (and the kv rider of a bundle): typed arrays, one element per checked op.
SELECT queen.kv_apply($1::text[], $2::text[], $3::text[], $4::text[]::jsonb[], $5::bigint[], $6::boolean[],
                      $7::bigint[], $8::boolean[], $9::text[]::numeric[], $10::text[]::numeric[],
                      $11::text[]::numeric[], $12::text[]::jsonb[], $13::text[], $14::text[], $15::integer[],
                      $16::boolean[], $17::text::jsonb)::text
