-- One locks call: typed arrays, one element per op (locks.rs, LockColumns).
SELECT queen.lock_apply($1::text[], $2::text[], $3::text[], $4::bigint[], $5::integer[], $6::bigint[], $7::integer[])
