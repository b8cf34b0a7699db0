-- Start-up (Engine::check_encryption_keys): recorded keys ($1) that no row uses any more.
DELETE FROM queen.encryption_keys WHERE key_id = ANY ($1)
