-- The operator surface: read models over the same tables, maintenance
-- switches, and the figures /metrics exports. Nothing here is on the hot
-- path (the pop entry points are in pop.sql).

-- 404 with {"error": ...}.
CREATE OR REPLACE FUNCTION queen.not_found(what text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION USING ERRCODE = 'QN404', MESSAGE = json_build_object('error', what || ' not found',
    'code', 'not_found')::text;
END $$;

-- One lane's counts for the queue-mode cursor, from offsets: O(1) plus one
-- index probe for the first message at or after the cursor (skipped when
-- the lane has no backlog). The probe skips a head the retention sweeper or
-- a delete removed, and gives the age of the oldest message not consumed;
-- a message deleted in the middle of the backlog still counts until the
-- cursor passes it. Processing: offsets under a live lease; pending: the
-- rest of the backlog.
CREATE OR REPLACE FUNCTION queen.lane_counts(p_partition_id uuid, p_next_seq bigint, p_cursor bigint,
                                             p_lease_expires_at timestamptz, p_batch_end bigint)
RETURNS TABLE (processing bigint, pending bigint, oldest_at timestamptz)
LANGUAGE sql STABLE AS $$
  SELECT x.processing, x.backlog - x.processing, h.created_at
    FROM (VALUES (1)) v
    LEFT JOIN LATERAL (SELECT m.seq, m.created_at FROM queen.messages m
                        WHERE p_next_seq > p_cursor AND m.partition_id = p_partition_id AND m.seq >= p_cursor
                        ORDER BY m.seq LIMIT 1) h ON true
    CROSS JOIN LATERAL (SELECT p_next_seq - coalesce(h.seq, p_next_seq) AS backlog,
                               CASE WHEN p_lease_expires_at > now() AND h.seq IS NOT NULL
                                    THEN greatest(least(p_batch_end, p_next_seq) - h.seq, 0)
                                    ELSE 0 END AS processing) x
$$;

-- Per-partition counts for one queue (queen.lane_counts), with the
-- partition's dead letters.
CREATE OR REPLACE FUNCTION queen.partition_stats(p_queue_id bigint)
RETURNS TABLE (partition_id uuid, name text, created_at timestamptz, total bigint, completed bigint,
               processing bigint, pending bigint, dead_letter bigint, last_push_at timestamptz)
LANGUAGE sql STABLE AS $$
  SELECT p.id, p.name, p.created_at,
         coalesce(c.next_seq, 0) + l.processing + l.pending,
         coalesce(c.next_seq, 0),
         l.processing,
         l.pending,
         (SELECT count(*) FROM queen.dead_letters d WHERE d.partition_id = p.id),
         p.last_push_at
    FROM queen.partitions p
    LEFT JOIN queen.cursors c ON c.partition_id = p.id AND c.consumer_group = queen.queue_mode()
    CROSS JOIN LATERAL queen.lane_counts(p.id, p.next_seq, coalesce(c.next_seq, 0), c.lease_expires_at,
                                         c.batch_end) l
   WHERE p.queue_id = p_queue_id
$$;

-- Every consumer group's position on one queue (queue mode included), one
-- element per group: partitions it has a cursor on, how many of them lag,
-- the lag in messages (offsets), and the creation time of the oldest
-- message it has not consumed (one probe per lagging partition).
CREATE OR REPLACE FUNCTION queen.group_counts(p_queue_id bigint) RETURNS json
LANGUAGE plpgsql STABLE SET plan_cache_mode = force_custom_plan AS $$
BEGIN
  RETURN (SELECT coalesce(json_agg(json_build_object('group', g.grp, 'members', g.members,
                                             'partitionsWithLag', g.lagging, 'lag', g.lag,
                                             'oldestAt', g.oldest_at) ORDER BY g.grp), '[]'::json)
    FROM (SELECT c.consumer_group AS grp, count(*) AS members,
                 count(*) FILTER (WHERE c.next_seq < p.next_seq) AS lagging,
                 coalesce(sum(p.next_seq - c.next_seq), 0) AS lag,
                 min((SELECT m.created_at FROM queen.messages m
                       WHERE c.next_seq < p.next_seq AND m.partition_id = c.partition_id
                         AND m.seq >= c.next_seq
                       ORDER BY m.seq LIMIT 1)) AS oldest_at
            FROM queen.cursors c JOIN queen.partitions p ON p.id = c.partition_id
           WHERE c.queue_id = p_queue_id
           GROUP BY c.consumer_group) g);
END $$;

-- One queue's counts, counted now: O(partitions) (queen.lane_counts per
-- partition), dead letters from their queue index, groups from
-- queen.group_counts. Custom plans: a queue of ten partitions and one of
-- 100,000 want different joins.
CREATE OR REPLACE FUNCTION queen.queue_counts_live(p_queue_id bigint)
RETURNS TABLE (partitions bigint, total bigint, completed bigint, processing bigint, pending bigint,
               dead_letter bigint, oldest_at timestamptz, groups json)
LANGUAGE plpgsql STABLE SET plan_cache_mode = force_custom_plan AS $$
BEGIN
  RETURN QUERY SELECT s.partitions, s.completed + s.processing + s.pending, s.completed, s.processing, s.pending,
         (SELECT count(*) FROM queen.dead_letters d WHERE d.queue_id = p_queue_id),
         s.oldest_at, queen.group_counts(p_queue_id)
    FROM (SELECT count(*) AS partitions, coalesce(sum(coalesce(c.next_seq, 0)), 0)::bigint AS completed,
                 coalesce(sum(l.processing), 0)::bigint AS processing,
                 coalesce(sum(l.pending), 0)::bigint AS pending, min(l.oldest_at) AS oldest_at
            FROM queen.partitions p
            LEFT JOIN queen.cursors c ON c.partition_id = p.id AND c.consumer_group = queen.queue_mode()
            CROSS JOIN LATERAL queen.lane_counts(p.id, p.next_seq, coalesce(c.next_seq, 0),
                                                 c.lease_expires_at, c.batch_end) l
           WHERE p.queue_id = p_queue_id) s;
END $$;

-- One queue's counts as the operator pages show them: its gauge when it has
-- one counted in the last ten minutes (a large queue; as_of is when it was
-- counted), else counted now (as_of NULL): a gauge no loop keeps up (every
-- broker's loop off, or stopped) is not shown for ever.
CREATE OR REPLACE FUNCTION queen.queue_counts(p_queue_id bigint)
RETURNS TABLE (partitions bigint, total bigint, completed bigint, processing bigint, pending bigint,
               dead_letter bigint, oldest_at timestamptz, groups json, as_of timestamptz)
LANGUAGE plpgsql STABLE AS $$
BEGIN
  RETURN QUERY SELECT g.partitions, g.total, g.completed, g.processing, g.pending, g.dead_letter,
                      g.oldest_at, g.groups, g.computed_at
                 FROM queen.queue_gauges g
                WHERE g.queue_id = p_queue_id AND g.computed_at > now() - interval '10 minutes';
  IF NOT FOUND THEN
    RETURN QUERY SELECT l.partitions, l.total, l.completed, l.processing, l.pending, l.dead_letter,
                        l.oldest_at, l.groups, NULL::timestamptz
                   FROM queen.queue_counts_live(p_queue_id) l;
  END IF;
END $$;

-- The gauge loop's step (gauges.rs): counts the queue of at least
-- p_min_partitions partitions whose gauge is most overdue (due p_every
-- after the last count, or twenty times what that count took, whichever is
-- later, so counting stays a small share of the database's time), and
-- drops the gauges of queues that shrank below the threshold. True when it
-- counted one (call again); false when none was due, or another broker is
-- counting it.
CREATE OR REPLACE FUNCTION queen.refresh_queue_gauge(p_min_partitions integer, p_every interval)
RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
  v_queue bigint;
  v_started timestamptz := clock_timestamp();
  c record;
BEGIN
  DELETE FROM queen.queue_gauges g
   WHERE (SELECT count(*) FROM (SELECT 1 FROM queen.partitions p WHERE p.queue_id = g.queue_id
                                 LIMIT p_min_partitions) x) < p_min_partitions;
  SELECT b.queue_id INTO v_queue
    FROM (SELECT p.queue_id FROM queen.partitions p GROUP BY p.queue_id
          HAVING count(*) >= p_min_partitions) b
    LEFT JOIN queen.queue_gauges g ON g.queue_id = b.queue_id
   WHERE g.queue_id IS NULL
      OR g.computed_at + greatest(p_every, g.took_ms * interval '20 milliseconds') <= now()
   ORDER BY g.computed_at NULLS FIRST, b.queue_id
   LIMIT 1;
  IF v_queue IS NULL OR NOT pg_try_advisory_xact_lock(hashtext('queen.queue_gauges'), hashtext(v_queue::text)) THEN
    RETURN false;
  END IF;
  SELECT * INTO c FROM queen.queue_counts_live(v_queue);
  INSERT INTO queen.queue_gauges AS g (queue_id, partitions, total, completed, processing, pending, dead_letter,
                                       oldest_at, groups, took_ms, computed_at)
  VALUES (v_queue, c.partitions, c.total, c.completed, c.processing, c.pending, c.dead_letter, c.oldest_at,
          c.groups, ceil(extract(epoch FROM clock_timestamp() - v_started) * 1000)::integer, now())
  ON CONFLICT (queue_id) DO UPDATE
    SET (partitions, total, completed, processing, pending, dead_letter, oldest_at, groups, took_ms, computed_at)
      = (EXCLUDED.partitions, EXCLUDED.total, EXCLUDED.completed, EXCLUDED.processing, EXCLUDED.pending,
         EXCLUDED.dead_letter, EXCLUDED.oldest_at, EXCLUDED.groups, EXCLUDED.took_ms, EXCLUDED.computed_at);
  RETURN true;
EXCEPTION WHEN foreign_key_violation THEN
  -- The queue was deleted while it was being counted: nothing to keep.
  RETURN false;
END $$;

-- A page of queues by name (p_limit NULL: all of them); the counts are
-- computed for the page only, and `total` counts every queue.
CREATE OR REPLACE FUNCTION queen.resources_queues(p_limit integer DEFAULT NULL, p_offset integer DEFAULT 0)
RETURNS json
LANGUAGE sql STABLE AS $$
  SELECT json_build_object('queues', coalesce(json_agg(json_build_object(
           'id', q.id, 'name', q.name, 'namespace', q.namespace, 'task', q.task,
           'createdAt', queen.iso(q.created_at), 'partitions', s.partitions,
           'messages', json_build_object('total', s.total, 'pending', s.pending, 'processing', s.processing),
           'asOf', queen.iso(s.as_of), 'options', queen.queue_options(q)) ORDER BY q.name), '[]'::json),
           'total', (SELECT count(*) FROM queen.queues))
    FROM (SELECT * FROM queen.queues ORDER BY name LIMIT p_limit OFFSET p_offset) q
    CROSS JOIN LATERAL queen.queue_counts(q.id) s
$$;

-- The dashboard's queues: a keyset page by name (`nextAfter` is the next
-- page's p_after, null on the last), each with queen.queue_counts: counts,
-- dead letters, the age of the oldest message queue mode has not consumed,
-- lag per consumer group (queue mode included), and `asOf` when the counts
-- are a large queue's gauge.
-- p_only: just that queue (the dashboard's queue page), without its partitions.
CREATE OR REPLACE FUNCTION queen.queues_page(p_after text, p_limit integer, p_only text DEFAULT NULL) RETURNS json
LANGUAGE sql STABLE AS $$
  SELECT json_build_object('queues', coalesce(json_agg(json_build_object(
           'name', q.name, 'namespace', q.namespace, 'task', q.task,
           'createdAt', queen.iso(q.created_at), 'partitions', s.partitions,
           'messages', json_build_object('total', s.total, 'pending', s.pending, 'processing', s.processing,
                                         'deadLetter', s.dead_letter),
           'oldestMessageAgeSeconds', coalesce(extract(epoch FROM now() - s.oldest_at)::float8, 0),
           'groupLag', (SELECT coalesce(json_agg(json_build_object('group', g->>'group', 'lag', (g->>'lag')::bigint)),
                                        '[]'::json)
                          FROM json_array_elements(s.groups) g),
           'asOf', queen.iso(s.as_of), 'options', queen.queue_options(q))
           ORDER BY q.name), '[]'::json),
           'nextAfter', CASE WHEN count(*) >= p_limit THEN max(q.name) END)
    FROM (SELECT * FROM queen.queues
           WHERE (p_after IS NULL OR name > p_after) AND (p_only IS NULL OR name = p_only)
           ORDER BY name LIMIT p_limit) q
    CROSS JOIN LATERAL queen.queue_counts(q.id) s
$$;

-- The dashboard's queue page: a keyset page of the queue's partitions by
-- name after p_after, each with its counts (queen.lane_counts)
-- and every consumer group's cursor on it: lag, and the lease holder.
CREATE OR REPLACE FUNCTION queen.queue_partitions_page(p_queue text, p_after text, p_limit integer) RETURNS json
LANGUAGE sql STABLE AS $$
  SELECT json_build_object(
           'partitions', coalesce(json_agg(json_build_object(
               'id', p.id, 'name', p.name, 'lastPushAt', queen.iso(p.last_push_at),
               'stats', json_build_object('pending', b.pending, 'processing', b.processing,
                                          'completed', coalesce(qm.next_seq, 0),
                                          'deadLetter', (SELECT count(*) FROM queen.dead_letters d
                                                          WHERE d.partition_id = p.id)),
               'groups', g.groups) ORDER BY p.name), '[]'::json),
           'nextAfter', CASE WHEN count(*) >= p_limit THEN max(p.name) END)
    -- Names are never empty, so '' starts the first page, and the bound
    -- stays an index condition of (queue_id, name) in a generic plan.
    FROM (SELECT p.* FROM queen.partitions p
           WHERE p.queue_id = (SELECT q.id FROM queen.queues q WHERE q.name = p_queue)
             AND p.name > coalesce(p_after, '')
           ORDER BY p.name LIMIT p_limit) p
    LEFT JOIN queen.cursors qm ON qm.partition_id = p.id AND qm.consumer_group = queen.queue_mode()
    CROSS JOIN LATERAL queen.lane_counts(p.id, p.next_seq, coalesce(qm.next_seq, 0), qm.lease_expires_at,
                                         qm.batch_end) b
    CROSS JOIN LATERAL (
      SELECT coalesce(json_agg(json_build_object('group', c.consumer_group, 'lag', p.next_seq - c.next_seq,
                 'workerId', CASE WHEN c.lease_expires_at > now() THEN c.lease_id END)
               ORDER BY c.consumer_group), '[]'::json) AS groups
        FROM queen.cursors c WHERE c.partition_id = p.id) g
$$;

CREATE OR REPLACE FUNCTION queen.resources_queue(p_name text) RETURNS json
LANGUAGE plpgsql STABLE AS $$
DECLARE
  q queen.queues;
  v json;
BEGIN
  SELECT * INTO q FROM queen.queues WHERE name = p_name;
  IF q.id IS NULL THEN
    PERFORM queen.not_found('Queue');
  END IF;
  SELECT json_build_object('id', q.id, 'name', q.name, 'namespace', q.namespace, 'task', q.task,
           'createdAt', queen.iso(q.created_at), 'options', queen.queue_options(q),
           'optionsNotActedOn', queen.options_not_acted_on(),
           'partitions', coalesce(json_agg(json_build_object('id', s.partition_id, 'name', s.name,
              'createdAt', queen.iso(s.created_at), 'lastPushAt', queen.iso(s.last_push_at),
              'stats', json_build_object('total', s.total, 'pending', s.pending, 'processing', s.processing,
                'completed', s.completed, 'deadLetter', s.dead_letter)) ORDER BY s.name), '[]'::json),
           'totals', json_build_object('total', coalesce(sum(s.total), 0), 'pending', coalesce(sum(s.pending), 0),
              'processing', coalesce(sum(s.processing), 0), 'completed', coalesce(sum(s.completed), 0),
              'deadLetter', coalesce(sum(s.dead_letter), 0)))
    INTO v
    FROM queen.partition_stats(q.id) s;
  RETURN v;
END $$;

-- Depth: messages visible now and not done for queue mode; the age of the
-- oldest of them (delayed messages are not visible, so they do not count).
CREATE OR REPLACE FUNCTION queen.queue_depths()
RETURNS TABLE (queue text, depth bigint, oldest_age_seconds double precision, dead_letters bigint)
LANGUAGE sql STABLE AS $$
  SELECT q.name,
         coalesce((SELECT count(*) FROM queen.partitions p
                     LEFT JOIN queen.cursors c ON c.partition_id = p.id AND c.consumer_group = queen.queue_mode()
                     JOIN queen.messages m ON m.partition_id = p.id AND m.seq >= coalesce(c.next_seq, 0)
                    WHERE p.queue_id = q.id
                      AND m.created_at <= now() - make_interval(secs => q.delayed_processing)), 0),
         -- The first message at or after the cursor (not the one at the
         -- cursor: a deleted message leaves a hole there).
         coalesce((SELECT extract(epoch FROM now() - min(h.created_at))
                     FROM queen.partitions p
                     LEFT JOIN queen.cursors c ON c.partition_id = p.id AND c.consumer_group = queen.queue_mode()
                     CROSS JOIN LATERAL (SELECT m.created_at FROM queen.messages m
                                          WHERE m.partition_id = p.id AND m.seq >= coalesce(c.next_seq, 0)
                                          ORDER BY m.seq LIMIT 1) h
                    WHERE p.queue_id = q.id
                      AND h.created_at <= now() - make_interval(secs => q.delayed_processing)), 0),
         (SELECT count(*) FROM queen.dead_letters d WHERE d.queue_id = q.id)
    FROM queen.queues q
$$;

CREATE OR REPLACE FUNCTION queen.resources_partitions(p_queue text) RETURNS json
LANGUAGE sql STABLE AS $$
  SELECT json_build_object('partitions', coalesce(json_agg(json_build_object(
           'id', s.partition_id, 'queue', q.name, 'name', s.name, 'createdAt', queen.iso(s.created_at),
           'lastPushAt', queen.iso(s.last_push_at),
           'messages', json_build_object('total', s.total, 'pending', s.pending, 'processing', s.processing,
             'completed', s.completed, 'deadLetter', s.dead_letter)) ORDER BY q.name, s.name), '[]'::json))
    FROM queen.queues q CROSS JOIN LATERAL queen.partition_stats(q.id) s
   WHERE p_queue IS NULL OR q.name = p_queue
$$;

-- Namespaces and tasks group queues by the labels configure stored.
CREATE OR REPLACE FUNCTION queen.resources_grouped(p_by text) RETURNS json
LANGUAGE sql STABLE AS $$
  SELECT json_build_object(CASE WHEN p_by = 'task' THEN 'tasks' ELSE 'namespaces' END,
           coalesce(json_agg(json_build_object(p_by, g.label, 'queues', g.queues, 'partitions', g.partitions,
             'messages', json_build_object('total', g.total, 'pending', g.pending)) ORDER BY g.label), '[]'::json))
    FROM (SELECT CASE WHEN p_by = 'task' THEN q.task ELSE q.namespace END AS label,
                 count(DISTINCT q.id) AS queues, count(s.partition_id) AS partitions,
                 coalesce(sum(s.total), 0) AS total, coalesce(sum(s.pending), 0) AS pending
            FROM queen.queues q LEFT JOIN LATERAL queen.partition_stats(q.id) s ON true
           WHERE (CASE WHEN p_by = 'task' THEN q.task ELSE q.namespace END) IS NOT NULL
           GROUP BY 1) g
$$;

-- Totals over every queue (queen.queue_counts: a large queue's gauge), and
-- the live KV keys: counted while the table holds fewer than 100,000 rows,
-- else the planner's row estimate (`estimated`: true).
CREATE OR REPLACE FUNCTION queen.resources_overview() RETURNS json
LANGUAGE sql STABLE AS $$
  SELECT json_build_object(
    'queues', (SELECT count(*) FROM queen.queues),
    'partitions', (SELECT count(*) FROM queen.partitions),
    'namespaces', (SELECT count(DISTINCT namespace) FROM queen.queues WHERE namespace IS NOT NULL),
    'tasks', (SELECT count(DISTINCT task) FROM queen.queues WHERE task IS NOT NULL),
    'consumerGroups', (SELECT count(*) FROM queen.consumer_groups),
    'messages', (SELECT json_build_object('total', coalesce(sum(s.total), 0), 'pending', coalesce(sum(s.pending), 0),
                   'processing', coalesce(sum(s.processing), 0), 'completed', coalesce(sum(s.completed), 0),
                   'deadLetter', (SELECT count(*) FROM queen.dead_letters), 'asOf', queen.iso(min(s.as_of)))
                   FROM queen.queues q CROSS JOIN LATERAL queen.queue_counts(q.id) s),
    'kv', (SELECT CASE WHEN c.reltuples < 100000
                       THEN json_build_object('keys', (SELECT count(*) FROM queen.kv
                                                        WHERE expires_at IS NULL OR expires_at > now()),
                                              'estimated', false)
                       ELSE json_build_object('keys', c.reltuples::bigint, 'estimated', true) END
             FROM pg_class c WHERE c.oid = 'queen.kv'::regclass),
    'timestamp', queen.iso(now()))
$$;

-- A message's state for one cursor.
CREATE OR REPLACE FUNCTION queen.message_status(c queen.cursors, p_seq bigint) RETURNS text
LANGUAGE sql STABLE AS $$
  SELECT CASE
    WHEN c.partition_id IS NULL THEN 'pending'
    WHEN p_seq < c.next_seq THEN 'completed'
    WHEN c.lease_expires_at > now() AND p_seq < c.batch_end THEN 'processing'
    ELSE 'pending' END
$$;

CREATE OR REPLACE FUNCTION queen.messages_list(p_queue text, p_partition text, p_status text, p_limit integer, p_offset integer)
RETURNS json
LANGUAGE plpgsql STABLE AS $$
BEGIN
  IF p_status IS NOT NULL AND p_status NOT IN ('pending', 'processing', 'completed', 'dead_letter') THEN
    PERFORM queen.bad_request('status', 'must be one of pending, processing, completed, dead_letter');
  END IF;
  RETURN (
    SELECT json_build_object('messages', coalesce(json_agg(x ORDER BY x.created_at DESC, x.seq DESC), '[]'::json))
      FROM (SELECT m.id, m.transaction_id AS "transactionId", m.partition_id AS "partitionId",
                   q.name || '/' || p.name AS "queuePath", q.name AS queue, p.name AS partition,
                   q.namespace, q.task,
                   CASE WHEN d.id IS NOT NULL THEN 'dead_letter' ELSE queen.message_status(c, m.seq) END AS status,
                   m.trace_id AS "traceId", m.producer_sub AS "producerSub", queen.iso(m.created_at) AS "createdAt",
                   CASE WHEN c.lease_expires_at > now() AND m.seq >= c.next_seq AND m.seq < c.batch_end
                        THEN queen.iso(c.lease_expires_at) END AS "leaseExpiresAt",
                   m.created_at, m.seq
              FROM queen.messages m
              JOIN queen.partitions p ON p.id = m.partition_id
              JOIN queen.queues q ON q.id = p.queue_id
              LEFT JOIN queen.cursors c ON c.partition_id = p.id AND c.consumer_group = queen.queue_mode()
              LEFT JOIN LATERAL (SELECT dl.id FROM queen.dead_letters dl
                                  WHERE dl.partition_id = m.partition_id AND dl.seq = m.seq LIMIT 1) d ON true
             WHERE (p_queue IS NULL OR q.name = p_queue) AND (p_partition IS NULL OR p.name = p_partition)
               AND (p_status IS NULL OR p_status = CASE WHEN d.id IS NOT NULL THEN 'dead_letter'
                                                        ELSE queen.message_status(c, m.seq) END)
             ORDER BY m.created_at DESC, m.seq DESC
             LIMIT p_limit OFFSET p_offset) x);
END $$;

-- The dashboard's message list: a keyset page, newest first, by
-- (created_at, partition_id, seq) strictly before the cursor p_before (the
-- `nextBefore` of the previous page, "created_at~partition id~seq", split
-- by the caller; NULL for the first page), in the shape of messages_list.
--
-- There is no index on created_at (every push would pay for it), so the
-- page walks partitions newest push first: a partition's messages are no
-- newer than its last push, so once p_limit messages are found the walk
-- stops at the first partition last pushed before the oldest of them. The
-- first page reads about p_limit partitions' heads whatever the queue's
-- size; the sort of the partitions by last push is the one cost that grows
-- with them.
CREATE OR REPLACE FUNCTION queen.messages_before(p_queue text, p_status text, p_before text[], p_limit integer)
RETURNS json
LANGUAGE plpgsql STABLE AS $$
DECLARE
  v_at timestamptz := p_before[1]::timestamptz;
  v_pid uuid := p_before[2]::uuid;
  v_seq bigint := p_before[3]::bigint;
  v_queue_id bigint;
  v_keys text[] := '{}';
  v_floor timestamptz;
  v_walk_at timestamptz;
  v_walk_id uuid;
  v_chunk integer;
  v_size integer;
  v_cursor queen.cursors;
  r record;
  m record;
BEGIN
  IF p_status IS NOT NULL AND p_status NOT IN ('pending', 'processing', 'completed', 'dead_letter') THEN
    PERFORM queen.bad_request('status', 'must be one of pending, processing, completed, dead_letter');
  END IF;
  IF p_limit IS NULL OR p_limit < 1 THEN
    PERFORM queen.bad_request('limit', 'must be at least 1');
  END IF;
  IF p_queue IS NOT NULL THEN
    SELECT q.id INTO v_queue_id FROM queen.queues q WHERE q.name = p_queue;
    IF v_queue_id IS NULL THEN
      RETURN json_build_object('messages', '[]'::json, 'nextBefore', NULL);
    END IF;
  END IF;
  -- Partitions in chunks by (last push, id) descending, a top-N sort per
  -- chunk: the first chunk (4 * p_limit) is nearly always the last on the
  -- first page; deeper pages double the chunk each time.
  v_size := 4 * p_limit;
  LOOP
    v_chunk := 0;
    FOR r IN
      SELECT p.id, p.last_push_at
        FROM queen.partitions p
       WHERE (v_queue_id IS NULL OR p.queue_id = v_queue_id) AND p.last_push_at IS NOT NULL
         AND (v_walk_at IS NULL OR (p.last_push_at, p.id) < (v_walk_at, v_walk_id))
       ORDER BY p.last_push_at DESC, p.id DESC
       LIMIT v_size
    LOOP
      v_chunk := v_chunk + 1;
      v_walk_at := r.last_push_at;
      v_walk_id := r.id;
      EXIT WHEN v_floor IS NOT NULL AND r.last_push_at < v_floor;
      SELECT * INTO v_cursor FROM queen.cursors c
       WHERE c.partition_id = r.id AND c.consumer_group = queen.queue_mode();
      -- Newest first; a partition's created_at never decreases with its
      -- offsets (push_rows stamps greatest(now(), last push)), so once the
      -- page is full the scan stops at the first message older than its floor.
      FOR m IN
        SELECT mm.created_at, mm.seq,
               CASE WHEN EXISTS (SELECT 1 FROM queen.dead_letters d
                                  WHERE d.partition_id = mm.partition_id AND d.seq = mm.seq)
                    THEN 'dead_letter' ELSE queen.message_status(v_cursor, mm.seq) END AS status
          FROM queen.messages mm
         WHERE mm.partition_id = r.id
           AND (v_at IS NULL OR (mm.created_at, mm.partition_id, mm.seq) < (v_at, v_pid, v_seq))
         ORDER BY mm.seq DESC
      LOOP
        EXIT WHEN v_floor IS NOT NULL AND m.created_at < v_floor;
        CONTINUE WHEN p_status IS NOT NULL AND m.status <> p_status;
        -- A key that sorts as (created_at, partition id, seq) does.
        v_keys := v_keys || (to_char(m.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')
                             || '~' || r.id::text || '~' || lpad(m.seq::text, 19, '0'));
        IF cardinality(v_keys) >= 2 * p_limit THEN
          SELECT array_agg(k ORDER BY k DESC) INTO v_keys
            FROM (SELECT k FROM unnest(v_keys) k ORDER BY k DESC LIMIT p_limit) x;
          v_floor := split_part(v_keys[p_limit], '~', 1)::timestamptz;
        END IF;
      END LOOP;
      IF cardinality(v_keys) >= p_limit THEN
        -- Keep the newest p_limit; the oldest of them is the floor.
        SELECT array_agg(k ORDER BY k DESC) INTO v_keys
          FROM (SELECT k FROM unnest(v_keys) k ORDER BY k DESC LIMIT p_limit) x;
        v_floor := split_part(v_keys[p_limit], '~', 1)::timestamptz;
      END IF;
    END LOOP;
    EXIT WHEN v_chunk < v_size OR (v_floor IS NOT NULL AND v_walk_at < v_floor);
    v_size := v_size * 2;
  END LOOP;
  RETURN (
    SELECT json_build_object(
             'messages', coalesce(json_agg(json_build_object('id', mm.id, 'transactionId', mm.transaction_id,
                 'partitionId', mm.partition_id, 'queuePath', q.name || '/' || p.name, 'queue', q.name,
                 'partition', p.name,
                 'status', CASE WHEN EXISTS (SELECT 1 FROM queen.dead_letters d
                                              WHERE d.partition_id = mm.partition_id AND d.seq = mm.seq)
                                THEN 'dead_letter' ELSE queen.message_status(c, mm.seq) END,
                 'traceId', mm.trace_id, 'producerSub', mm.producer_sub, 'createdAt', queen.iso(mm.created_at))
                 ORDER BY mm.created_at DESC, mm.partition_id DESC, mm.seq DESC), '[]'::json),
             'nextBefore', CASE WHEN count(*) >= p_limit THEN
                 (array_agg(mm.created_at::text || '~' || mm.partition_id::text || '~' || mm.seq::text
                            ORDER BY mm.created_at, mm.partition_id, mm.seq))[1] END)
      FROM (SELECT split_part(k, '~', 2)::uuid AS pid, split_part(k, '~', 3)::bigint AS seq
              FROM unnest(v_keys) k ORDER BY k DESC LIMIT p_limit) k
      JOIN queen.messages mm ON mm.partition_id = k.pid AND mm.seq = k.seq
      JOIN queen.partitions p ON p.id = mm.partition_id
      JOIN queen.queues q ON q.id = p.queue_id
      LEFT JOIN queen.cursors c ON c.partition_id = p.id AND c.consumer_group = queen.queue_mode());
END $$;

-- The dashboard's search by transaction id: the messages that carry it on
-- any partition (one probe of messages_transaction_idx per partition), newest
-- first, in the shape of messages_list.
CREATE OR REPLACE FUNCTION queen.messages_by_transaction(p_tx text, p_limit integer) RETURNS json
LANGUAGE sql STABLE AS $$
  SELECT json_build_object('messages', coalesce(json_agg(json_build_object(
           'id', x.id, 'transactionId', x.transaction_id, 'partitionId', x.partition_id,
           'queuePath', x.qname || '/' || x.pname, 'queue', x.qname, 'partition', x.pname,
           'status', x.status, 'createdAt', queen.iso(x.created_at)) ORDER BY x.created_at DESC, x.seq DESC),
           '[]'::json))
    FROM (SELECT m.id, m.transaction_id, m.partition_id, m.created_at, m.seq, q.name AS qname, p.name AS pname,
                 CASE WHEN EXISTS (SELECT 1 FROM queen.dead_letters dl
                                    WHERE dl.partition_id = m.partition_id AND dl.seq = m.seq)
                      THEN 'dead_letter' ELSE queen.message_status(c, m.seq) END AS status
            FROM queen.partitions p
            JOIN queen.queues q ON q.id = p.queue_id
            CROSS JOIN LATERAL (SELECT * FROM queen.messages mm
                                 WHERE mm.partition_id = p.id AND mm.transaction_id = p_tx) m
            LEFT JOIN queen.cursors c ON c.partition_id = p.id AND c.consumer_group = queen.queue_mode()
           ORDER BY m.created_at DESC, m.seq DESC
           LIMIT p_limit) x
$$;

-- GET /api/v1/messages/:partitionId/:transactionId, with the consumption
-- state of every group that has a cursor on the partition.
CREATE OR REPLACE FUNCTION queen.message_detail(p_partition_id uuid, p_tx text) RETURNS json
LANGUAGE plpgsql STABLE AS $$
DECLARE
  m queen.messages;
  v json;
BEGIN
  SELECT * INTO m FROM queen.messages WHERE partition_id = p_partition_id AND transaction_id = p_tx
   ORDER BY seq DESC LIMIT 1;
  IF m.id IS NULL THEN
    PERFORM queen.not_found('Message');
  END IF;
  SELECT json_build_object('id', m.id, 'transactionId', m.transaction_id, 'partitionId', m.partition_id,
           'queue', q.name, 'partition', p.name, 'queuePath', q.name || '/' || p.name,
           'payload', m.payload, 'traceId', m.trace_id, 'producerSub', m.producer_sub,
           'createdAt', queen.iso(m.created_at), 'offset', m.seq,
           'isEncrypted', queen.is_sealed(m.payload::text),
           'errorMessage', (SELECT d.error_message FROM queen.dead_letters d
                             WHERE d.partition_id = m.partition_id AND d.seq = m.seq ORDER BY d.id DESC LIMIT 1),
           'queueConfig', json_build_object('leaseTime', q.lease_time, 'retryLimit', q.retry_limit,
             'retryDelay', q.retry_delay, 'ttl', q.ttl, 'priority', q.priority),
           'consumerGroups', coalesce((SELECT json_agg(json_build_object('name', c.consumer_group,
               'consumed', m.seq < c.next_seq, 'status', queen.message_status(c, m.seq),
               'retryCount', c.retry_count,
               'leaseExpiresAt', CASE WHEN queen.message_status(c, m.seq) = 'processing'
                                      THEN queen.iso(c.lease_expires_at) END) ORDER BY c.consumer_group)
             FROM queen.cursors c WHERE c.partition_id = m.partition_id), '[]'::json))
    INTO v
    FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id
   WHERE p.id = m.partition_id;
  RETURN v;
END $$;

-- DELETE /api/v1/messages/:pid/:txn: removes the message from the log.
-- Cursors are offsets, so the lane simply has a hole there.
CREATE OR REPLACE FUNCTION queen.message_delete(p_partition_id uuid, p_tx text) RETURNS json
LANGUAGE plpgsql AS $$
DECLARE
  v_count integer;
BEGIN
  PERFORM 1 FROM queen.partitions WHERE id = p_partition_id FOR NO KEY UPDATE;
  WITH gone AS (DELETE FROM queen.messages WHERE partition_id = p_partition_id AND transaction_id = p_tx RETURNING 1)
  SELECT count(*) INTO v_count FROM gone;
  RETURN json_build_object('success', v_count > 0, 'partitionId', p_partition_id, 'transactionId', p_tx,
    'message', CASE WHEN v_count > 0 THEN 'Message deleted successfully' ELSE 'Message not found' END);
END $$;

-- POST /api/v1/messages/:pid/:txn/retry: the newest dead-letter record of
-- that message (or the record p_dlq_id, which must be one of them) moves as
-- POST /api/v1/dlq/:id/replay moves it (queen.dlq_replay, one rule): back on
-- its lane with the transaction id `dlq:<record id>`, that record only.
-- p_payload as in queen.dlq_replay. The answer keeps the retry's fields
-- (transactionId is the one addressed) beside the replay's.
CREATE OR REPLACE FUNCTION queen.message_retry(p_partition_id uuid, p_tx text, p_dlq_id bigint,
  p_payload text, OUT result json, OUT queued text[])
LANGUAGE plpgsql AS $$
DECLARE
  v_id bigint;
  v_moved json;
BEGIN
  SELECT d.id INTO v_id FROM queen.dead_letters d
   WHERE d.partition_id = p_partition_id AND d.transaction_id = p_tx
     AND (p_dlq_id IS NULL OR d.id = p_dlq_id)
   ORDER BY d.id DESC LIMIT 1;
  IF v_id IS NULL THEN
    PERFORM queen.not_found('Dead letter');
  END IF;
  SELECT x.result, x.queued INTO v_moved, queued FROM queen.dlq_replay(v_id, NULL, NULL, p_payload) x;
  result := (jsonb_build_object('success', v_moved ->> 'result' = 'moved', 'partitionId', p_partition_id,
                                'transactionId', p_tx) || v_moved::jsonb)::json;
END $$;

-- The dashboard's "delete a dead letter": the DLQ entry goes and nothing is
-- redelivered (the message stays consumed on its lane); 404 when absent.
CREATE OR REPLACE FUNCTION queen.dead_letter_delete(p_partition_id uuid, p_tx text) RETURNS json
LANGUAGE plpgsql AS $$
DECLARE
  v_count integer;
BEGIN
  WITH gone AS (DELETE FROM queen.dead_letters WHERE partition_id = p_partition_id AND transaction_id = p_tx
                RETURNING 1)
  SELECT count(*) INTO v_count FROM gone;
  IF v_count = 0 THEN
    PERFORM queen.not_found('Dead letter');
  END IF;
  RETURN json_build_object('success', true, 'partitionId', p_partition_id, 'transactionId', p_tx,
    'deleted', v_count);
END $$;

-- GET /api/v1/resources/kv/namespaces: every namespace with its live key
-- count and its expired rows the sweeper has not deleted yet (a namespace
-- holding only those is listed, since kv_list shows them). One row per
-- namespace in name order; the engine writes the answer (kv/browse.rs).
CREATE OR REPLACE FUNCTION queen.kv_namespace_counts()
RETURNS TABLE (namespace text, live bigint, expired bigint)
LANGUAGE sql STABLE AS $$
  SELECT ns,
         count(*) FILTER (WHERE expires_at IS NULL OR expires_at > now()),
         count(*) FILTER (WHERE expires_at <= now())
    FROM queen.kv GROUP BY ns
   ORDER BY ns
$$;

-- POST /api/v1/resources/kv/list: one keyset page of a namespace's keys under
-- p_prefix (empty: all), strictly after p_cursor, rows as KV reads answer
-- them plus `expired` (true for a row past its expiry that the sweeper has
-- not deleted yet; every other operation treats it as absent). At most
-- p_limit rows (checked in Rust: 1..1000) and p_max_bytes of keys and values
-- (at least one row when one exists); nextCursor when more remain. The
-- bounds are plain comparisons so that they stay index conditions in a
-- generic plan (as in kv_get_prefix); PL/pgSQL so the plan is cached.
-- One row per key of the page in key order, each with `more` (rows follow
-- the page: its last key is the next cursor); the engine writes the page.
CREATE OR REPLACE FUNCTION queen.kv_list(
  p_ns text, p_prefix text, p_cursor text, p_limit integer, p_max_bytes bigint)
RETURNS TABLE (key text, value text, version bigint, expires_at text, updated_at text, expired boolean,
               more boolean)
LANGUAGE plpgsql STABLE SET plan_cache_mode = force_generic_plan AS $$
BEGIN
  RETURN QUERY
  WITH scan AS (
    SELECT k, row_number() OVER (ORDER BY k.key) AS rn,
           sum(octet_length(k.key) + octet_length(k.value::text)) OVER (ORDER BY k.key) AS bytes
      FROM queen.kv k
     WHERE k.ns = p_ns
       AND k.key >= p_prefix
       AND k.key > coalesce(p_cursor, '')
       AND k.key < coalesce(queen.kv_prefix_end(p_prefix), repeat(chr(1114111), 129))
     ORDER BY k.key
     LIMIT p_limit + 1
  ),
  page AS (
    SELECT s.* FROM scan s WHERE s.rn <= p_limit AND (s.rn = 1 OR s.bytes <= p_max_bytes)
  )
  SELECT (p.k).key, (p.k).value::text, (p.k).version, queen.iso((p.k).expires_at), queen.iso((p.k).updated_at),
         coalesce((p.k).expires_at <= now(), false),
         (SELECT count(*) FROM scan) > (SELECT count(*) FROM page)
    FROM page p
   ORDER BY p.rn;
END $$;

-- The dashboard's KV namespaces, a keyset page by name (`nextAfter` is the
-- `p_after` of the next page, null on the last): the names by a skip scan of
-- the primary key (one probe per namespace, whatever the keys), each with
-- its live keys counted up to 1,000 (`keys`); past that `keys` is null,
-- `keysAtLeast` 1000, and `keysEstimate` the planner statistics' share of
-- the table when the namespace is among its most common values.
CREATE OR REPLACE FUNCTION queen.kv_namespaces(p_after text, p_limit integer) RETURNS json
LANGUAGE sql STABLE AS $$
  WITH RECURSIVE names AS (
    (SELECT k.ns FROM queen.kv k WHERE k.ns > coalesce(p_after, '') ORDER BY k.ns LIMIT 1)
    UNION ALL
    SELECT (SELECT k.ns FROM queen.kv k WHERE k.ns > n.ns ORDER BY k.ns LIMIT 1) FROM names n WHERE n.ns IS NOT NULL
  ), page AS (
    SELECT n.ns FROM names n WHERE n.ns IS NOT NULL LIMIT p_limit
  ), counted AS (
    SELECT p.ns, (SELECT count(*) FROM (SELECT 1 FROM queen.kv k
                                          WHERE k.ns = p.ns AND (k.expires_at IS NULL OR k.expires_at > now())
                                          LIMIT 1001) x) AS live
      FROM page p
  )
  SELECT json_build_object(
           'namespaces', coalesce(json_agg(json_build_object(
               'namespace', c.ns,
               'keys', CASE WHEN c.live <= 1000 THEN c.live END,
               'keysAtLeast', CASE WHEN c.live > 1000 THEN 1000 END,
               'keysEstimate', CASE WHEN c.live > 1000 THEN (
                   SELECT (s.most_common_freqs[array_position(s.most_common_vals::text::text[], c.ns::text)]
                           * t.reltuples)::bigint
                     FROM pg_stats s, pg_class t
                    WHERE s.schemaname = 'queen' AND s.tablename = 'kv' AND s.attname = 'ns'
                      AND t.oid = 'queen.kv'::regclass) END) ORDER BY c.ns), '[]'::json),
           'nextAfter', CASE WHEN count(*) >= p_limit THEN max(c.ns) END)
    FROM counted c
$$;

-- The dashboard's keys of one namespace, optionally under a prefix (empty:
-- every key, which getPrefix refuses), a keyset page by key. The range on
-- the prefix keeps the primary-key scan inside it (keys are COLLATE "C").
CREATE OR REPLACE FUNCTION queen.kv_page(p_ns text, p_prefix text, p_after text, p_limit integer) RETURNS json
LANGUAGE sql STABLE AS $$
  SELECT json_build_object(
           'rows', coalesce(json_agg(json_build_object('key', k.key, 'value', k.value, 'version', k.version,
                      'expiresAt', queen.iso(k.expires_at), 'updatedAt', queen.iso(k.updated_at)) ORDER BY k.key),
                      '[]'::json),
           'nextAfter', CASE WHEN count(*) >= p_limit THEN max(k.key) END)
    FROM (SELECT * FROM queen.kv
           WHERE ns = p_ns AND (p_after IS NULL OR key > p_after)
             AND (coalesce(p_prefix, '') = ''
                  OR (key >= p_prefix AND key < p_prefix || chr(1114111) AND starts_with(key, p_prefix)))
             AND (expires_at IS NULL OR expires_at > now())
           ORDER BY key LIMIT p_limit) k
$$;

-- One consumer group's entry per (group, queue), queue mode included, as
-- the consumer-group routes and the dashboard show it: of the groups named
-- p_name and/or of queue p_queue, after the keyset (queue, group), at most
-- p_limit (NULL: all) in (queue, group) order. The groups are cut before
-- the cursors are joined, so a page reads only its own groups' partitions.
CREATE OR REPLACE FUNCTION queen.consumer_group_entries(p_name text, p_queue text, p_after_queue text,
                                                       p_after_group text, p_limit integer) RETURNS SETOF json
LANGUAGE sql STABLE AS $$
  SELECT to_json(x) FROM (
    SELECT g.name, g.queue_name AS "queueName", json_build_array(g.queue_name) AS topics,
           count(c.partition_id) AS members,
           count(c.partition_id) FILTER (WHERE c.next_seq < p.next_seq) AS "partitionsWithLag",
           coalesce(sum(p.next_seq - c.next_seq), 0) AS "totalLag",
           coalesce(max(extract(epoch FROM now() - (SELECT m.created_at FROM queen.messages m
                      WHERE m.partition_id = c.partition_id AND m.seq >= c.next_seq
                      ORDER BY m.seq LIMIT 1))), 0) AS "maxTimeLag",
           CASE WHEN coalesce(sum(p.next_seq - c.next_seq), 0) = 0 THEN 'Stable' ELSE 'Lagging' END AS state,
           g.subscription_mode AS "subscriptionMode", queen.iso(g.subscription_from) AS "subscriptionTimestamp",
           queen.iso(g.created_at) AS "subscriptionCreatedAt",
           -- Per partition: how far behind in messages and in seconds (the age of
           -- the oldest message not consumed yet), how many it has consumed, and
           -- who holds it now (the lease id: what a consumer acks and extends with).
           coalesce(json_agg(json_build_object('partition', p.name, 'partitionId', p.id, 'offset', c.next_seq,
             'offsetLag', p.next_seq - c.next_seq, 'leaseActive', coalesce(c.lease_expires_at > now(), false),
             'timeLagSeconds', coalesce(extract(epoch FROM now() - (SELECT m.created_at FROM queen.messages m
                      WHERE m.partition_id = c.partition_id AND m.seq >= c.next_seq
                      ORDER BY m.seq LIMIT 1))::float8, 0),
             'totalConsumed', c.next_seq,
             'workerId', CASE WHEN c.lease_expires_at > now() THEN c.lease_id END,
             'lastConsumedAt', queen.iso(c.last_delivered_at)) ORDER BY p.name)
             FILTER (WHERE p.id IS NOT NULL), '[]'::json) AS partitions
      FROM (SELECT * FROM queen.consumer_groups cg
             WHERE (p_name IS NULL OR cg.name = p_name)
               AND (p_queue IS NULL OR cg.queue_name = p_queue)
               AND (p_after_queue IS NULL OR (cg.queue_name, cg.name) > (p_after_queue, coalesce(p_after_group, '')))
             ORDER BY cg.queue_name, cg.name LIMIT p_limit) g
      LEFT JOIN queen.queues q ON q.name = g.queue_name
      LEFT JOIN queen.cursors c ON c.queue_id = q.id AND c.consumer_group = g.name
      LEFT JOIN queen.partitions p ON p.id = c.partition_id
     GROUP BY g.name, g.queue_name, g.subscription_mode, g.subscription_from, g.created_at) x
$$;

-- Consumer groups: every entry, or the lagging ones (behind on some
-- partition, by at least p_min_lag_seconds).
CREATE OR REPLACE FUNCTION queen.consumer_groups_list(p_name text, p_min_lag_seconds double precision) RETURNS json
LANGUAGE sql STABLE AS $$
  SELECT coalesce(json_agg(e ORDER BY e->>'name', e->>'queueName'), '[]'::json)
    FROM queen.consumer_group_entries(p_name, NULL, NULL, NULL, NULL) e
   WHERE p_min_lag_seconds IS NULL
      OR ((e->>'totalLag')::numeric > 0 AND (e->>'maxTimeLag')::float8 >= p_min_lag_seconds)
$$;

-- The dashboard's consumer groups: of one queue or all, a keyset page by
-- (queue, group) on the primary key, each a summary from its queue's
-- queen.queue_counts (no per-partition list: the queue page has that),
-- with `asOf` when those are a large queue's gauge.
CREATE OR REPLACE FUNCTION queen.consumer_groups_page(p_queue text, p_after_queue text, p_after_group text,
                                                     p_limit integer) RETURNS json
LANGUAGE sql STABLE AS $$
  SELECT json_build_object(
           'groups', coalesce(json_agg(json_build_object(
               'name', e.name, 'queueName', e.queue_name,
               'members', coalesce((e.g->>'members')::bigint, 0),
               'partitionsWithLag', coalesce((e.g->>'partitionsWithLag')::bigint, 0),
               'totalLag', coalesce((e.g->>'lag')::bigint, 0),
               'maxTimeLag', coalesce(extract(epoch FROM now() - (e.g->>'oldestAt')::timestamptz)::float8, 0),
               'state', CASE WHEN coalesce((e.g->>'lag')::bigint, 0) = 0 THEN 'Stable' ELSE 'Lagging' END,
               'subscriptionMode', e.subscription_mode,
               'subscriptionTimestamp', queen.iso(e.subscription_from),
               'asOf', queen.iso(e.as_of))
             ORDER BY e.queue_name, e.name), '[]'::json),
           'nextAfter', CASE WHEN count(*) >= p_limit THEN
             (array_agg(json_build_object('queue', e.queue_name, 'group', e.name)
                        ORDER BY e.queue_name DESC, e.name DESC))[1] END)
    FROM (SELECT cg.*, s.as_of,
                 (SELECT x FROM json_array_elements(s.groups) x WHERE x->>'group' = cg.name) AS g
            FROM (SELECT * FROM queen.consumer_groups cg
                   WHERE (p_queue IS NULL OR cg.queue_name = p_queue)
                     AND (cg.queue_name, cg.name) > (coalesce(p_after_queue, ''), coalesce(p_after_group, ''))
                   ORDER BY cg.queue_name, cg.name LIMIT p_limit) cg
            LEFT JOIN queen.queues q ON q.name = cg.queue_name
            LEFT JOIN LATERAL queen.queue_counts(q.id) s ON true) e
$$;

-- Maintenance switches: one row, read by push and pop (a primary-key read).
CREATE OR REPLACE FUNCTION queen.maintenance() RETURNS json
LANGUAGE sql STABLE AS $$
  SELECT json_build_object('maintenanceMode', coalesce(max(push_paused::int), 0) = 1,
                           'popMaintenanceMode', coalesce(max(pop_paused::int), 0) = 1,
                           'bufferedMessages', 0, 'bufferHealthy', true)
    FROM queen.maintenance_switches
$$;

CREATE OR REPLACE FUNCTION queen.set_maintenance(p_push boolean, p_pop boolean) RETURNS json
LANGUAGE sql AS $$
  INSERT INTO queen.maintenance_switches (id, push_paused, pop_paused)
  VALUES (true, coalesce(p_push, false), coalesce(p_pop, false))
  ON CONFLICT (id) DO UPDATE SET push_paused = coalesce(p_push, queen.maintenance_switches.push_paused),
                                 pop_paused = coalesce(p_pop, queen.maintenance_switches.pop_paused),
                                 updated_at = now();
  SELECT queen.maintenance();
$$;

-- GET /api/v1/status: one summary of the broker's state.
CREATE OR REPLACE FUNCTION queen.status() RETURNS json
LANGUAGE sql STABLE AS $$
  SELECT json_build_object('overview', queen.resources_overview(), 'maintenance', queen.maintenance(),
    'queues', (SELECT coalesce(json_agg(json_build_object('queue', d.queue, 'depth', d.depth,
                 'oldestMessageAgeSeconds', d.oldest_age_seconds, 'deadLetters', d.dead_letters) ORDER BY d.queue), '[]'::json)
                 FROM queen.queue_depths() d),
    'database', json_build_object('version', current_setting('server_version'),
                 'sizeBytes', pg_database_size(current_database())))
$$;
