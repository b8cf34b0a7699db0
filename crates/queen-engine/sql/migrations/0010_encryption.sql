-- Encryption at rest: which key seals a queue's payloads (an 8-hex-digit
-- fingerprint, never the key), so a broker with another key, or none, is
-- refused before it pops or pushes, instead of writing or consuming what
-- no one can read.
ALTER TABLE queen.queues ADD COLUMN encryption_key_id text
  CHECK (encryption_key_id ~ '^[0-9a-f]{8}$');
