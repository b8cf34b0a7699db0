-- Engine acks of a batch (batch.rs): the typed arrays of ack.sql, and each item's request number (from 0).
SELECT a.verdicts, a.released, a.dlq
  FROM queen.ack_requests($1::text[], $2::uuid[], $3::text[], $4::text[], $5::text[], $6::text[], $7::integer[]) a
