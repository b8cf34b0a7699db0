-- Engine pops of a batch (batch.rs): pop.sql's parameters as arrays, one
-- element per request, and the key id; answers index-aligned.
SELECT queen.pop_requests($1::text[], $2::text[], $3::text[], $4::integer[], $5::integer[], $6::integer[],
                          $7::boolean[], $8::text[], $9::text[], $10::text)
