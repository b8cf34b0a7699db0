-- KV incrs of a batch on distinct keys (batch.rs), set-based: ns, key,
-- delta, min, max (integers as text, min and max NULL when absent),
-- ttlSeconds (NULL with forever), forever. Answers each member's verdict
-- (the text kv_incr answers), in member order.
--
-- Only for batches in which every member's first value (0 + delta) is
-- within its own limits (the engine checks that, IncrColumns): then the
-- insert of an absent key, and the fresh lineage of an expired one, always
-- apply, and only a live row can refuse (type or limit).
--
-- Rows go in (ns, key) byte order, one at a time: each row takes its key
-- lock and draws its version (kv_lock_version) just before its insert takes
-- the row lock, the global order of every KV writer (as kv_put_batch.sql).
-- A refused incr rewrites the row with itself; it applied exactly when the
-- row carries the version it drew, the session's currval while its row is
-- returned.
WITH m AS MATERIALIZED (
  SELECT u.ns COLLATE "C" AS ns, u.key COLLATE "C" AS key, u.delta::numeric AS delta,
         u.lo::numeric AS lo, u.hi::numeric AS hi, u.ttl, u.forever, u.n
    FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::bigint[], $7::boolean[])
         WITH ORDINALITY u(ns, key, delta, lo, hi, ttl, forever, n)
), up AS (
  INSERT INTO queen.kv AS t (ns, key, value, version, expires_at, updated_at)
  SELECT s.ns, s.key, to_jsonb(0 + s.delta), queen.kv_lock_version(s.ns, s.key),
         CASE WHEN s.forever THEN NULL ELSE now() + make_interval(secs => s.ttl) END, now()
    FROM (SELECT * FROM m ORDER BY m.ns, m.key OFFSET 0) s
  ON CONFLICT (ns, key) DO UPDATE
    SET (value, version, expires_at, updated_at) = (
      SELECT CASE WHEN x.apply THEN to_jsonb(x.next) ELSE t.value END,
             CASE WHEN x.apply THEN EXCLUDED.version ELSE t.version END,
             -- A live row keeps the expiry it was born with; an expired one
             -- starts a fresh lineage with the call's.
             CASE WHEN x.apply AND NOT x.live THEN EXCLUDED.expires_at ELSE t.expires_at END,
             CASE WHEN x.apply THEN EXCLUDED.updated_at ELSE t.updated_at END
        FROM (SELECT b.live, b.cur + b.delta AS next,
                     b.cur IS NOT NULL
                       AND (b.hi IS NULL OR b.cur + b.delta <= b.hi)
                       AND (b.lo IS NULL OR b.cur + b.delta >= b.lo) AS apply
                FROM (SELECT a.live, a.delta, a.lo, a.hi,
                             -- Absent or expired counts as 0; a live row
                             -- that is not an integer number is NULL (type).
                             CASE WHEN NOT a.live THEN 0
                                  WHEN jsonb_typeof(t.value) <> 'number' THEN NULL
                                  WHEN (t.value #>> '{}')::numeric = trunc((t.value #>> '{}')::numeric)
                                  THEN (t.value #>> '{}')::numeric END AS cur
                        FROM (SELECT t.expires_at IS NULL OR t.expires_at > now() AS live, m.delta, m.lo, m.hi
                                FROM m WHERE m.ns = EXCLUDED.ns AND m.key = EXCLUDED.key) a) b) x)
  RETURNING t.ns, t.key, t.value, t.version, t.version = currval('queen.kv_version_seq') AS applied
)
SELECT array_agg((CASE
           WHEN up.applied
             THEN jsonb_build_object('applied', true, 'key', m.key, 'value', up.value, 'version', up.version)
           WHEN jsonb_typeof(up.value) <> 'number'
             THEN jsonb_build_object('applied', false, 'reason', 'type', 'key', m.key, 'value', up.value,
                                     'version', up.version)
           WHEN (up.value #>> '{}')::numeric <> trunc((up.value #>> '{}')::numeric)
             THEN jsonb_build_object('applied', false, 'reason', 'type', 'key', m.key, 'value', up.value,
                                     'version', up.version)
           ELSE jsonb_build_object('applied', false, 'reason', 'limit', 'key', m.key,
                                   'value', to_jsonb((up.value #>> '{}')::numeric), 'version', up.version)
         END)::text ORDER BY m.n)
  FROM m JOIN up ON up.ns = m.ns AND up.key = m.key
