-- POST /streams/v1/cycle (queen.stream_cycle): one statement, one transaction. The
-- engine writes the answer from what the cycle did (engine/streams.rs).
SELECT c.replayed, c.queue_name, c.state_ops, c.released, c.dlq, c.queued, c.push_ids
  FROM queen.stream_cycle($1::uuid, $2::uuid, $3::text,
  $4::text[], $5::text[], $6::text[], $7::text[], $8::text[], $9::text[], $10::text[], $11::text[],
  $12::text[], $13::boolean, $14::text, $15::text, $16::text, $17::integer, $18::boolean, $19::text[]) c
