-- plain KV putIfAbsent of a new random key (TTL 3600 s): insert, or take
-- over an expired row (which does not exist for any op); a live row is left
-- alone and no row comes back. Answers the version.
\set k random(1, 9000000000000000000)
INSERT INTO queen.kv AS t (ns, key, value, version, expires_at)
VALUES ('bench', 'n:' || :k, '1', nextval('queen.kv_version_seq'), now() + interval '3600 seconds')
ON CONFLICT (ns, key) DO UPDATE
   SET value = excluded.value, version = excluded.version, expires_at = excluded.expires_at, updated_at = now()
 WHERE t.expires_at <= now()
RETURNING version;
