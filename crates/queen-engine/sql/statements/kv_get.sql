-- KV get: the live row of one key (expired rows do not exist).
SELECT value::text, version, queen.iso(expires_at), queen.iso(updated_at)
  FROM queen.kv
 WHERE ns = $1 AND key = $2 AND (expires_at IS NULL OR expires_at > now())
