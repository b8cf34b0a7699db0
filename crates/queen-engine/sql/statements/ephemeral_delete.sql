-- Engine::ephemeral_delete: the queue's row, only at the epoch this broker holds.
DELETE FROM queen.ephemeral_queues WHERE queue = $1::text AND owner_id = $2::uuid AND epoch = $3::bigint
