-- Engine bundles of a batch (batch.rs), bundles without pushes or timers:
-- per request its transaction id, lent lease and slot count, where its acks
-- and KV ops start (from 1) and how many; the flat acks and KV ops as in
-- transaction.sql.
SELECT queen.transaction_requests($1::text[], $2::text[], $3::bigint, $4::integer[],
  $5::integer[], $6::integer[], $7::integer[], $8::integer[],
  $9::integer[], $10::text[], $11::uuid[], $12::text[], $13::text[], $14::text[], $15::text[],
  $16::text[], $17::text[], $18::text[], $19::text[]::jsonb[], $20::bigint[], $21::boolean[], $22::bigint[],
  $23::boolean[], $24::text[]::numeric[], $25::text[]::numeric[], $26::text[]::numeric[], $27::text[]::jsonb[],
  $28::text[], $29::text[], $30::integer[], $31::boolean[])
