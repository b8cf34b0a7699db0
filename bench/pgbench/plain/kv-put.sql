-- plain KV put (upsert, forever) of a number on one of :keys keys in :ns
-- (-D ns=bench -D keys=10000): one INSERT ... ON CONFLICT DO UPDATE with a
-- version from the store's one sequence, answering the version.
\set k random(1, :keys)
INSERT INTO queen.kv AS t (ns, key, value, version, expires_at)
VALUES (:ns, 'k:' || :k, to_jsonb(:k::bigint), nextval('queen.kv_version_seq'), NULL)
ON CONFLICT (ns, key) DO UPDATE
   SET value = excluded.value, version = excluded.version, expires_at = excluded.expires_at, updated_at = now()
RETURNING version;
