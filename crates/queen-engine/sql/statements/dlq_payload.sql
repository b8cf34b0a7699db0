-- A dead-letter record's stored payload (engine/dlq.rs), to seal for an encrypted destination.
SELECT payload::text FROM queen.dead_letters WHERE id = $1
