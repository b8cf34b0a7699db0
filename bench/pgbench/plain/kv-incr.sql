-- plain KV incr by 1 (forever) of one of 10,000 counters: one upsert; a
-- live counter adds 1 and keeps its expiry, an absent or expired one starts
-- at 1 with the new expiry; a value that is not a number fails the cast (our
-- `type` refusal). Answers value and version.
\set k random(1, 10000)
INSERT INTO queen.kv AS t (ns, key, value, version, expires_at)
VALUES ('bench', 'c:' || :k, '1', nextval('queen.kv_version_seq'), NULL)
ON CONFLICT (ns, key) DO UPDATE
   SET value = CASE WHEN t.expires_at <= now() THEN excluded.value ELSE to_jsonb(t.value::numeric + 1) END,
       expires_at = CASE WHEN t.expires_at <= now() THEN excluded.expires_at ELSE t.expires_at END,
       version = excluded.version, updated_at = now()
RETURNING value, version;
