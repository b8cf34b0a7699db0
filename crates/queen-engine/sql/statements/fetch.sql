-- One fetch call (reads.rs): queues, partitions, offsets, per-entry byte
-- budgets, the call's byte budget, records per entry at most.
SELECT f.errors, f.high_watermarks, f.log_starts, f.record_counts, f.offsets, f.transaction_ids, f.payloads,
       f.times
  FROM queen.fetch($1::text[], $2::text[], $3::bigint[], $4::bigint[], $5::bigint, $6::integer) f
