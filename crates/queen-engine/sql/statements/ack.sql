-- Engine::ack_items: typed arrays, one element per checked acknowledgment.
SELECT a.verdicts, a.released, a.dlq
  FROM queen.ack_rows($1::text[], $2::uuid[], $3::text[], $4::text[], $5::text[], $6::text[]) a
