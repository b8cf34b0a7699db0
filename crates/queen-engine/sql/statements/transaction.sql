-- Engine::transaction: the checked bundle as typed arrays (push items, acks, kv ops, timer ops) and their result slots.
SELECT queen.transaction_rows($1::text, $2::text, $3::bigint, $4::integer,
  $5::integer[], $6::text[], $7::text[], $8::text[], $9::text[], $10::text[],
  $11::integer[], $12::text[], $13::uuid[], $14::text[], $15::text[], $16::text[], $17::text[],
  $18::text[], $19::text[], $20::text[], $21::text[]::jsonb[], $22::bigint[], $23::boolean[], $24::bigint[],
  $25::boolean[], $26::text[]::numeric[], $27::text[]::numeric[], $28::text[]::numeric[], $29::text[]::jsonb[],
  $30::text[], $31::text[], $32::integer[], $33::boolean[],
  $34::text[], $35::text[], $36::text[], $37::text[], $38::text[], $39::bigint[], $40::text[],
  p_push_subs => $41::text[], t_sub => $42::text)::text
