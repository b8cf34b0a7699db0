-- The ephemeral heartbeat: renews the (queue, epoch) pairs this broker holds.
SELECT queen.ephemeral_renew($1::uuid, $2::text[], $3::bigint[])
