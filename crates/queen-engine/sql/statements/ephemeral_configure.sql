-- Engine::ephemeral_configure: the declared options, only at the epoch this broker holds.
UPDATE queen.ephemeral_queues SET options = $2::text::jsonb, updated_at = now()
 WHERE queue = $1::text AND owner_id = $3::uuid AND epoch = $4::bigint
