-- Whether queue $1 is encrypted now (false when it does not exist; engine/sealing.rs).
SELECT coalesce(bool_or(encryption_enabled), false) FROM queen.queues WHERE name = $1
