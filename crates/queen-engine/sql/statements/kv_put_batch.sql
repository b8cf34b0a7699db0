-- KV puts and putIfAbsents of a batch on distinct keys (batch.rs), set-based:
-- ns, key, value, ttlSeconds (NULL with forever), forever, ifAbsent.
-- Answers each member's verdict (the text kv_put answers), in member order.
--
-- Rows go in (ns, key) byte order, one at a time: each row takes its key
-- lock and draws its version (kv_lock_version) just before its insert takes
-- the row lock, the global order of every KV writer. A putIfAbsent that
-- finds a live row rewrites the row with itself, so that RETURNING shows
-- the row as the winner left it (the statement's snapshot may predate the
-- winner's commit); it applied exactly when the row carries the version it
-- drew, which is the session's currval while its row is returned.
WITH m AS MATERIALIZED (
  SELECT u.ns COLLATE "C" AS ns, u.key COLLATE "C" AS key, u.value, u.ttl, u.forever, u.if_absent, u.n
    FROM unnest($1::text[], $2::text[], $3::text[]::jsonb[], $4::bigint[], $5::boolean[], $6::boolean[])
         WITH ORDINALITY u(ns, key, value, ttl, forever, if_absent, n)
), up AS (
  INSERT INTO queen.kv AS t (ns, key, value, version, expires_at, updated_at)
  SELECT s.ns, s.key, s.value, queen.kv_lock_version(s.ns, s.key),
         CASE WHEN s.forever THEN NULL ELSE now() + make_interval(secs => s.ttl) END, now()
    FROM (SELECT * FROM m ORDER BY m.ns, m.key OFFSET 0) s
  ON CONFLICT (ns, key) DO UPDATE
    SET (value, version, expires_at, updated_at) = (
      SELECT CASE WHEN x.apply THEN EXCLUDED.value ELSE t.value END,
             CASE WHEN x.apply THEN EXCLUDED.version ELSE t.version END,
             CASE WHEN x.apply THEN EXCLUDED.expires_at ELSE t.expires_at END,
             CASE WHEN x.apply THEN EXCLUDED.updated_at ELSE t.updated_at END
        FROM (SELECT NOT m.if_absent OR (t.expires_at IS NOT NULL AND t.expires_at <= now()) AS apply
                FROM m WHERE m.ns = EXCLUDED.ns AND m.key = EXCLUDED.key) x)
  RETURNING t.ns, t.key, t.value, t.version, t.version = currval('queen.kv_version_seq') AS applied
)
SELECT array_agg((CASE WHEN up.applied
                   THEN jsonb_build_object('applied', true, 'key', m.key, 'value', up.value, 'version', up.version)
                   ELSE jsonb_build_object('applied', false, 'reason', 'exists', 'key', m.key,
                                           'value', up.value, 'version', up.version) END)::text
                 ORDER BY m.n)
  FROM m JOIN up ON up.ns = m.ns AND up.key = m.key
