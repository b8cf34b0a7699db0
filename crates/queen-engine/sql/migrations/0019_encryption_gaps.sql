-- Encryption without gaps, and key rotation (issue 37).
--
-- Stream state of an encrypted source is sealed at rest. `value` is jsonb,
-- which cannot hold the envelope's \u0000 marker, so the envelope goes in
-- `sealed` (JSON text, as messages store it) and `value` keeps only what
-- SQL must read: `windowEnd`, when the state has a numeric one (the ripe
-- filter of state/get), else {}.
ALTER TABLE queen.stream_state ADD COLUMN sealed text
  CHECK (sealed IS NULL OR left(sealed, 20) = '{"\u0000sealed":"v1.');

-- The keys that may seal a stored row: a queue's key when it turned
-- encrypted, a broker's current key when it starts while any queue is
-- encrypted. A broker without one of these refuses to start; `queen
-- encryption rotate` removes a key once no row is sealed with it.
CREATE TABLE queen.encryption_keys (
    key_id        text PRIMARY KEY CHECK (key_id ~ '^[0-9a-f]{8}$'),
    registered_at timestamptz NOT NULL DEFAULT now()
);
INSERT INTO queen.encryption_keys (key_id)
SELECT DISTINCT encryption_key_id FROM queen.queues WHERE encryption_key_id IS NOT NULL;
