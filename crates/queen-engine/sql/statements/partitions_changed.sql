-- One partitions/changed call (reads.rs): queues, page sizes, since, after.
-- The safe time, per entry whether its queue exists and its row count, then
-- the rows' fields entry after entry (reads.rs ChangedColumns).
SELECT c.safe_time, c.known, c.sizes, c.names, c.ids, c.last_offsets, c.log_starts, c.last_writes
  FROM queen.partitions_changed($1::text[], $2::integer[], $3::text[], $4::uuid[]) c
