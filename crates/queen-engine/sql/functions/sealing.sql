-- Sealing stored payloads (sealing.rs, Engine::reseal): after a configure
-- turns a queue's encryption on, and for `queen encryption rotate`. SQL
-- cannot seal, so the engine reads a page of rows not sealed with its
-- current key, seals them, and writes each back only if it is unchanged
-- (a page is its own transaction: the pass is online and resumable, and
-- a row is never sealed twice over, since the write compares the old text).
--
-- A row is taken when its queue is encrypted (a plain row, or one sealed
-- with another key) or when it is sealed with another key whatever the
-- queue's flag now (a queue turned off keeps what was sealed). Pages walk
-- each table in key order from (p_k1, p_k2, p_k3), exclusive.

-- The stub `value` of a sealed stream state row: only its windowEnd.
CREATE OR REPLACE FUNCTION queen.stream_state_stub(v jsonb) RETURNS jsonb
LANGUAGE sql IMMUTABLE AS $$
  SELECT CASE WHEN jsonb_typeof(v -> 'windowEnd') = 'number' THEN jsonb_build_object('windowEnd', v -> 'windowEnd')
         ELSE '{}'::jsonb END
$$;

CREATE OR REPLACE FUNCTION queen.reseal_page(
  p_table text, p_k1 text, p_k2 text, p_k3 text, p_queue text, p_key_id text, p_limit integer)
RETURNS TABLE (k1 text, k2 text, k3 text, old text)
LANGUAGE plpgsql AS $$
BEGIN
  IF p_table = 'messages' THEN
    RETURN QUERY
      SELECT m.partition_id::text, m.seq::text, ''::text, m.payload::text
        FROM queen.messages m
        JOIN queen.partitions p ON p.id = m.partition_id
        JOIN queen.queues q ON q.id = p.queue_id
       WHERE (m.partition_id, m.seq) > (p_k1::uuid, p_k2::bigint)
         AND (p_queue IS NULL OR q.name = p_queue)
         AND (q.encryption_enabled OR queen.is_sealed(m.payload::text))
         AND NOT queen.sealed_with(m.payload::text, p_key_id)
       ORDER BY m.partition_id, m.seq LIMIT p_limit;
  ELSIF p_table = 'dead_letters' THEN
    RETURN QUERY
      SELECT d.id::text, ''::text, ''::text, d.payload::text
        FROM queen.dead_letters d
        JOIN queen.queues q ON q.id = d.queue_id
       WHERE d.id > p_k1::bigint
         AND (p_queue IS NULL OR q.name = p_queue)
         AND (q.encryption_enabled OR queen.is_sealed(d.payload::text))
         AND NOT queen.sealed_with(d.payload::text, p_key_id)
       ORDER BY d.id LIMIT p_limit;
  ELSIF p_table = 'timers' THEN
    RETURN QUERY
      SELECT t.queue_name, t.timer_key::text, ''::text, t.payload::text
        FROM queen.timers t
        LEFT JOIN queen.queues q ON q.name = t.queue_name
       WHERE (t.queue_name, t.timer_key) > (p_k1, p_k2 COLLATE "C")
         AND (p_queue IS NULL OR t.queue_name = p_queue)
         AND (coalesce(q.encryption_enabled, false) OR queen.is_sealed(t.payload::text))
         AND NOT queen.sealed_with(t.payload::text, p_key_id)
       ORDER BY t.queue_name, t.timer_key LIMIT p_limit;
  ELSIF p_table = 'stream_state' THEN
    RETURN QUERY
      SELECT s.query_id::text, s.partition_id::text, s.key::text, coalesce(s.sealed, s.value::text)
        FROM queen.stream_state s
        JOIN queen.partitions p ON p.id = s.partition_id
        JOIN queen.queues q ON q.id = p.queue_id
       WHERE (s.query_id, s.partition_id, s.key) > (p_k1::uuid, p_k2::uuid, p_k3 COLLATE "C")
         AND (p_queue IS NULL OR q.name = p_queue)
         AND (q.encryption_enabled OR s.sealed IS NOT NULL)
         AND NOT queen.sealed_with(s.sealed, p_key_id)
       ORDER BY s.query_id, s.partition_id, s.key LIMIT p_limit;
  ELSE
    PERFORM queen.bad_request('table', 'is not a sealed table');
  END IF;
END $$;

-- Writes the sealed texts of a page back, each only over its unchanged
-- old text; answers how many rows were written.
CREATE OR REPLACE FUNCTION queen.reseal_apply(
  p_table text, p_k1 text[], p_k2 text[], p_k3 text[], p_old text[], p_new text[]) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
  n integer;
BEGIN
  IF p_table = 'messages' THEN
    UPDATE queen.messages m SET payload = u.nw::json
      FROM unnest(p_k1, p_k2, p_old, p_new) u(k1, k2, od, nw)
     WHERE m.partition_id = u.k1::uuid AND m.seq = u.k2::bigint AND m.payload::text IS NOT DISTINCT FROM u.od;
  ELSIF p_table = 'dead_letters' THEN
    UPDATE queen.dead_letters d SET payload = u.nw::json
      FROM unnest(p_k1, p_old, p_new) u(k1, od, nw)
     WHERE d.id = u.k1::bigint AND d.payload::text IS NOT DISTINCT FROM u.od;
  ELSIF p_table = 'timers' THEN
    UPDATE queen.timers t SET payload = u.nw::json
      FROM unnest(p_k1, p_k2, p_old, p_new) u(k1, k2, od, nw)
     WHERE t.queue_name = u.k1 AND t.timer_key = u.k2 AND t.payload::text = u.od;
  ELSIF p_table = 'stream_state' THEN
    UPDATE queen.stream_state s
       SET sealed = u.nw, value = CASE WHEN s.sealed IS NULL THEN queen.stream_state_stub(s.value) ELSE s.value END
      FROM unnest(p_k1, p_k2, p_k3, p_old, p_new) u(k1, k2, k3, od, nw)
     WHERE s.query_id = u.k1::uuid AND s.partition_id = u.k2::uuid AND s.key = u.k3
       AND coalesce(s.sealed, s.value::text) = u.od;
  ELSE
    PERFORM queen.bad_request('table', 'is not a sealed table');
  END IF;
  GET DIAGNOSTICS n = ROW_COUNT;
  RETURN n;
END $$;

-- Rows sealed with a key other than p_keep, one per key id (a startup
-- check and the end of a rotation): only the tables' keys, never payloads.
CREATE OR REPLACE FUNCTION queen.sealed_key_ids_other_than(p_keep text[]) RETURNS text[]
LANGUAGE sql STABLE AS $$
  SELECT coalesce(array_agg(DISTINCT x.k ORDER BY x.k), '{}') FROM (
    SELECT substr(m.payload::text, 21, 8) AS k FROM queen.messages m
     WHERE queen.is_sealed(m.payload::text) AND NOT substr(m.payload::text, 21, 8) = ANY (p_keep)
    UNION ALL
    SELECT substr(d.payload::text, 21, 8) FROM queen.dead_letters d
     WHERE queen.is_sealed(d.payload::text) AND NOT substr(d.payload::text, 21, 8) = ANY (p_keep)
    UNION ALL
    SELECT substr(t.payload::text, 21, 8) FROM queen.timers t
     WHERE queen.is_sealed(t.payload::text) AND NOT substr(t.payload::text, 21, 8) = ANY (p_keep)
    UNION ALL
    SELECT substr(s.sealed, 21, 8) FROM queen.stream_state s
     WHERE s.sealed IS NOT NULL AND NOT substr(s.sealed, 21, 8) = ANY (p_keep)) x
$$;
