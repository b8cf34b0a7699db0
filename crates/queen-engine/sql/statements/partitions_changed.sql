-- One partitions/changed call (reads.rs): queues, page sizes, since, after.
SELECT queen.partitions_changed($1::text[], $2::integer[], $3::text[], $4::uuid[])
