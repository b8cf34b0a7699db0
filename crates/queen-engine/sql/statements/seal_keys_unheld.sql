-- Start-up (Engine::check_encryption_keys): recorded keys this broker does not hold ($1: its ids).
SELECT coalesce(array_agg(key_id ORDER BY key_id), '{}') FROM queen.encryption_keys WHERE NOT key_id = ANY ($1)
