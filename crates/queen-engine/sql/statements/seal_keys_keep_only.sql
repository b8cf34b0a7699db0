-- queen encryption rotate (sealing.rs), once no row is sealed with another key:
-- forget every key but $1.
DELETE FROM queen.encryption_keys WHERE key_id <> $1
