-- plain KV put (upsert, forever) of a string of the run's size (-D
-- value=<letters>, sent as a parameter as our HTTP body carries it) on one
-- of :keys keys in :ns (-D ns=vs -D keys=1000): as kv-put.sql.
\set k random(1, :keys)
INSERT INTO queen.kv AS t (ns, key, value, version, expires_at)
VALUES (:ns, 'k:' || :k, to_jsonb(:value::text), nextval('queen.kv_version_seq'), NULL)
ON CONFLICT (ns, key) DO UPDATE
   SET value = excluded.value, version = excluded.version, expires_at = excluded.expires_at, updated_at = now()
RETURNING version;
