-- The ephemeral heartbeat: rows of implicit queues this broker forgot (idle).
DELETE FROM queen.ephemeral_queues WHERE queue = ANY($1::text[]) AND owner_id = $2::uuid AND options IS NULL
