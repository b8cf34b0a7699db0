-- Engine bundles of a batch (batch.rs), bundles without pushes or timers:
-- per request its transaction id, lent lease and slot count, and how many
-- of the flat acks and KV ops are its own; the flat acks and KV ops as in
-- transaction.sql. Answers each request's body, and whether it was refused.
SELECT answers, refused FROM queen.transaction_batch($1::text[], $2::text[], $3::bigint, $4::integer[],
  $5::integer[], $6::integer[],
  $7::integer[], $8::text[], $9::uuid[], $10::text[], $11::text[], $12::text[], $13::text[],
  $14::text[], $15::text[], $16::text[], $17::text[]::jsonb[], $18::bigint[], $19::boolean[], $20::bigint[],
  $21::boolean[], $22::text[]::numeric[], $23::text[]::numeric[], $24::text[]::numeric[], $25::text[]::jsonb[],
  $26::text[], $27::text[], $28::integer[], $29::boolean[])
