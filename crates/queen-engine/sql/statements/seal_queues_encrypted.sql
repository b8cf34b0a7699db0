-- The encryption flag of the queues named in $1, after a push met a changed one
-- (QN409; engine/sealing.rs).
SELECT name, encryption_enabled FROM queen.queues WHERE name = ANY($1)
