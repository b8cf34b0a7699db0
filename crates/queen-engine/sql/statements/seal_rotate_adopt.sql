-- queen encryption rotate (sealing.rs): every encrypted queue moves to the new key $1,
-- which is recorded as one that may seal rows.
WITH moved AS (UPDATE queen.queues SET encryption_key_id = $1
                 WHERE encryption_key_id IS NOT NULL AND encryption_key_id <> $1 RETURNING 1)
INSERT INTO queen.encryption_keys (key_id) VALUES ($1) ON CONFLICT DO NOTHING
