-- Start-up (Engine::check_encryption_keys): the queues of a retired key this broker
-- holds ($2, its key ids) move to its current key $1, which is recorded when any
-- queue is encrypted.
WITH moved AS (UPDATE queen.queues SET encryption_key_id = $1
                 WHERE encryption_key_id = ANY ($2) AND encryption_key_id <> $1 RETURNING 1)
INSERT INTO queen.encryption_keys (key_id)
SELECT $1 WHERE EXISTS (SELECT 1 FROM queen.queues WHERE encryption_key_id IS NOT NULL)
   OR EXISTS (SELECT 1 FROM moved)
ON CONFLICT DO NOTHING
