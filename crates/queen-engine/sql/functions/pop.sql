-- Consumer-group registration and pop.

-- Registers a group on its first pop (even an empty one); a registered
-- group's stored position wins over whatever later pops send.
-- Locks: the queue row FOR NO KEY UPDATE, which waits for pushes that are
-- creating partitions (they hold FOR SHARE), so no partition misses a cursor.
-- Called from queen.pop only, whose plan_cache_mode setting it runs under.
CREATE OR REPLACE FUNCTION queen.register_group(p_queue text, p_group text, p_mode text, p_from text)
RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
  v_mode text;
  v_from timestamptz;
  v_inserted boolean;
  v_qid bigint;
BEGIN
  IF EXISTS (SELECT 1 FROM queen.consumer_groups WHERE queue_name = p_queue AND name = p_group) THEN
    RETURN;
  END IF;
  IF p_group = queen.queue_mode() THEN
    v_mode := 'all';
  ELSIF p_from IS NOT NULL AND p_from <> '' THEN
    IF lower(p_from) = 'now' THEN
      v_mode := 'new';
    ELSE
      BEGIN
        v_from := p_from::timestamptz;
      EXCEPTION WHEN others THEN
        PERFORM queen.bad_request('subscriptionFrom', 'must be "now" or an ISO 8601 timestamp');
      END;
      v_mode := 'timestamp';
    END IF;
  ELSE
    v_mode := CASE lower(coalesce(p_mode, ''))
      WHEN '' THEN 'all' WHEN 'all' THEN 'all' WHEN 'from_beginning' THEN 'all'
      WHEN 'new' THEN 'new' WHEN 'new-only' THEN 'new' WHEN 'new_only' THEN 'new' END;
    IF v_mode IS NULL THEN
      PERFORM queen.bad_request('subscriptionMode', 'must be one of all, from_beginning, new, new-only');
    END IF;
  END IF;

  -- Serialises with pushes that create partitions (see queen.push): without
  -- it, a registration racing the push that creates the queue sees no queue,
  -- the push sees no group, and the group never gets a cursor on that lane.
  PERFORM pg_advisory_xact_lock(1364542789, hashtext(p_queue));
  INSERT INTO queen.consumer_groups (queue_name, name, subscription_mode, subscription_from)
  VALUES (p_queue, p_group, v_mode, v_from)
  ON CONFLICT DO NOTHING
  RETURNING true INTO v_inserted;
  IF v_inserted IS NULL THEN
    RETURN;
  END IF;
  -- Tells a batch of pops (queen.pop_requests) that its commit fixes a
  -- group's start and must wait for the flush.
  PERFORM set_config('queen.group_registered', 'on', true);

  SELECT id INTO v_qid FROM queen.queues WHERE name = p_queue FOR NO KEY UPDATE;
  IF v_qid IS NULL THEN
    RETURN;
  END IF;
  INSERT INTO queen.cursors (partition_id, consumer_group, queue_id, next_seq, hold_until)
  SELECT p.id, p_group, v_qid,
         CASE v_mode
           WHEN 'all' THEN 0
           WHEN 'new' THEN p.next_seq
           ELSE coalesce((SELECT min(m.seq) FROM queen.messages m
                           WHERE m.partition_id = p.id AND m.created_at >= v_from), p.next_seq)
         END,
         CASE WHEN v_from > now() THEN v_from END
    FROM queen.partitions p
   WHERE p.queue_id = v_qid
  ON CONFLICT DO NOTHING;
END $$;

-- GET /api/v1/pop/queue/:queue[/partition/:partition].
-- Claims up to p_partitions free lanes of the group (FOR UPDATE SKIP LOCKED
-- on cursor rows, so concurrent pops never wait on each other), delivers at
-- most p_batch messages in total under one lease id, and either leases the
-- lanes or (auto-ack) commits the cursor at delivery. Answers the lanes and
-- their messages as typed columns (queen.popped); NULL when empty.
--
-- Which lanes: a named partition is looked up by name. Otherwise the pop
-- walks queen.ready_lanes of (queue, group) in fairness order (least
-- recently delivered first, from an index) and stops as soon as it has its
-- lanes, so its cost does not grow with the number of partitions. Ready rows
-- of drained lanes are removed on the way (see queen.pop_lane).
CREATE OR REPLACE FUNCTION queen.pop(
  p_queue text, p_partition text, p_group text, p_batch integer, p_partitions integer,
  p_lease_seconds integer, p_auto_ack boolean, p_sub_mode text, p_sub_from text)
RETURNS queen.popped
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $$
DECLARE
  q queen.queues;
  v_group text := coalesce(nullif(p_group, ''), queen.queue_mode());
  v_lease uuid;
  v_lease_secs integer;
  v_left integer := p_batch;
  v_batch queen.lane_batch;
  v_out queen.popped;
  v_pid uuid;
  v_leased boolean;
  v_lanes refcursor;
  head record;
  v_registered boolean := false;
  -- Whether the caller's transaction wrote before this pop: then it is not
  -- the pop's own, and its commit must wait for the flush.
  v_wrote_before boolean := pg_current_xact_id_if_assigned() IS NOT NULL;
BEGIN
  IF p_batch IS NULL OR p_batch < 1 THEN
    PERFORM queen.bad_request('batch', 'must be a positive integer');
  END IF;
  IF p_partitions IS NULL OR p_partitions < 1 THEN
    PERFORM queen.bad_request('partitions', 'must be a positive integer');
  END IF;
  IF p_lease_seconds IS NOT NULL AND p_lease_seconds < 1 THEN
    PERFORM queen.bad_request('leaseSeconds', 'must be a positive integer');
  END IF;

  -- One statement for the queue row, the named partition and whether the
  -- group is registered (a registered group's position is fixed; only a
  -- first pop registers, and a group may register before its queue exists).
  SELECT q0 AS qrow, p.id AS pid,
         EXISTS (SELECT 1 FROM queen.consumer_groups g WHERE g.queue_name = p_queue AND g.name = v_group) AS known
    INTO head
    FROM (SELECT 1) one
    LEFT JOIN queen.queues q0 ON q0.name = p_queue
    LEFT JOIN queen.partitions p ON p_partition IS NOT NULL AND p.queue_id = q0.id AND p.name = p_partition;
  IF NOT head.known THEN
    PERFORM queen.register_group(p_queue, v_group, p_sub_mode, p_sub_from);
    v_registered := true;
  END IF;
  -- A lease is soft state: a pop that only takes leases (and tidies lanes)
  -- commits without waiting for its WAL flush. If PostgreSQL crashes before
  -- the flush, the lease ends early and the messages are delivered again
  -- (at-least-once); any later synchronous commit (the ack, a bundle)
  -- flushes it first, since WAL is written in order. An auto-ack pop moves
  -- the cursor and a registering pop fixes a group's start: both wait. The
  -- setting covers the whole transaction, so it is taken only when the pop
  -- is the transaction (the engine's pops are statements of their own).
  IF NOT p_auto_ack AND NOT v_registered AND NOT v_wrote_before THEN
    PERFORM set_config('synchronous_commit', 'off', true);
  END IF;
  q := head.qrow;
  IF q.id IS NULL THEN
    RETURN NULL;
  END IF;
  v_lease_secs := coalesce(p_lease_seconds, q.lease_time);
  IF NOT p_auto_ack THEN
    v_lease := queen.lease_id_for(q.id);
  END IF;

  IF p_partition IS NOT NULL THEN
    v_pid := head.pid;
    IF v_pid IS NULL THEN
      RETURN NULL;
    END IF;
    v_batch := queen.pop_lane(q, v_pid, v_group, v_left, v_lease, v_lease_secs, p_auto_ack, false);
    IF v_batch.n IS NULL THEN
      RETURN NULL;
    END IF;
    RETURN (q.name, v_lease, v_group, ARRAY[v_pid], ARRAY[v_batch.partition_name], ARRAY[v_batch.n],
            v_batch.ids, v_batch.transaction_ids, v_batch.trace_ids, v_batch.payloads, v_batch.producer_subs,
            v_batch.created_ats)::queen.popped;
  ELSE
    v_out := (q.name, v_lease, v_group, '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}')::queen.popped;
    -- An explicit cursor gets a fast-start plan: the ordered index walk.
    OPEN v_lanes NO SCROLL FOR
      SELECT r.partition_id, c.lease_expires_at > now()
        FROM queen.ready_lanes r
        LEFT JOIN queen.cursors c ON c.partition_id = r.partition_id AND c.consumer_group = r.consumer_group
       WHERE r.queue_id = q.id AND r.consumer_group = v_group
       ORDER BY r.queue_id, r.consumer_group, r.delivered_at NULLS FIRST, r.partition_id;
    LOOP
      FETCH v_lanes INTO v_pid, v_leased;
      EXIT WHEN NOT FOUND;
      -- A live lease (as of the walk's snapshot) cannot be claimed: skip it
      -- without a statement. queen.pop_lane re-checks under the row lock.
      CONTINUE WHEN v_leased;
      v_batch := queen.pop_lane(q, v_pid, v_group, v_left, v_lease, v_lease_secs, p_auto_ack, true);
      CONTINUE WHEN v_batch.n IS NULL;
      v_out.lane_ids := v_out.lane_ids || v_pid;
      v_out.lane_names := v_out.lane_names || v_batch.partition_name;
      v_out.lane_sizes := v_out.lane_sizes || v_batch.n;
      v_out.ids := v_out.ids || v_batch.ids;
      v_out.transaction_ids := v_out.transaction_ids || v_batch.transaction_ids;
      v_out.trace_ids := v_out.trace_ids || v_batch.trace_ids;
      v_out.payloads := v_out.payloads || v_batch.payloads;
      v_out.producer_subs := v_out.producer_subs || v_batch.producer_subs;
      v_out.created_ats := v_out.created_ats || v_batch.created_ats;
      v_left := v_left - v_batch.n;
      EXIT WHEN cardinality(v_out.lane_ids) >= p_partitions OR v_left <= 0;
    END LOOP;
    CLOSE v_lanes;
    IF cardinality(v_out.lane_ids) > 0 THEN
      RETURN v_out;
    END IF;
  END IF;
  RETURN NULL;
END $$;

-- Where a held cursor (cursors.hold_until: a group subscribed from a time
-- still to come when its cursor was made) really starts: the first message
-- at or after p_from created at or after the hold, else the lane's end.
-- created_at rises with seq in a partition, so the skipped messages are a
-- prefix. Called only for held cursors (a CASE guards every call).
CREATE OR REPLACE FUNCTION queen.held_start(p_pid uuid, p_from bigint, p_hold timestamptz) RETURNS bigint
LANGUAGE sql STABLE AS $$
  SELECT coalesce((SELECT m.seq FROM queen.messages m
                    WHERE m.partition_id = p_pid AND m.seq >= p_from AND m.created_at >= p_hold
                    ORDER BY m.seq LIMIT 1),
                  (SELECT p.next_seq FROM queen.partitions p WHERE p.id = p_pid), p_from)
$$;

-- Up to p_max messages of a lane from p_from in offset order (delayed
-- messages not yet due left out): each field as an array in that order
-- (payloads as stored, perhaps sealed), the count and the last offset (0
-- and NULLs when there is none).
CREATE OR REPLACE FUNCTION queen.lane_messages(q queen.queues, p_pid uuid, p_from bigint, p_max integer)
RETURNS TABLE (ids uuid[], transaction_ids text[], trace_ids text[], payloads text[], producer_subs text[],
               created_ats text[], n integer, last bigint)
-- A set-returning SQL function of one SELECT: inlined into the caller's
-- statement, so planned once with it (see queen.uuid_v7 for the cost of a
-- SQL function that is not).
LANGUAGE sql STABLE AS $$
  SELECT array_agg(m.id ORDER BY m.seq), array_agg(m.transaction_id ORDER BY m.seq),
         array_agg(m.trace_id ORDER BY m.seq), array_agg(m.payload::text ORDER BY m.seq),
         array_agg(m.producer_sub ORDER BY m.seq), array_agg(queen.iso(m.created_at) ORDER BY m.seq),
         count(*)::integer, max(m.seq)
    FROM (SELECT * FROM queen.messages m
           WHERE m.partition_id = p_pid AND m.seq >= p_from
             AND (q.delayed_processing = 0
                  OR m.created_at <= now() - make_interval(secs => q.delayed_processing))
           ORDER BY m.seq
           LIMIT p_max) m
$$;

-- A cursor's hold once a pop has moved it past the held head: kept while
-- a push that began before the hold may still commit older messages (a
-- minute's margin), then cleared, and the pop reads from the cursor again.
CREATE OR REPLACE FUNCTION queen.hold_left(p_hold timestamptz) RETURNS timestamptz
LANGUAGE sql STABLE AS $$
  SELECT CASE WHEN p_hold < now() - interval '1 minute' THEN NULL ELSE p_hold END
$$;

-- One lane of a pop: claims the cursor (FOR UPDATE SKIP LOCKED, free lease,
-- window buffer and delay respected), reads up to p_max messages in offset
-- order, and leases or commits them. Answers the partition's name and the
-- messages (queen.lane_batch); NULL when the lane gives nothing.
--
-- A drained lane (cursor at the lane's end) loses its ready row here, but
-- only while this call holds the cursor row lock and a share lock on the
-- partition row (taken with SKIP LOCKED, so a push in flight, which holds
-- the partition FOR NO KEY UPDATE until commit, keeps the row): then no
-- push or seek can have given the lane a backlog that this call cannot see,
-- and any later one adds the row again (queen.push_rows marks the lanes of
-- cursors that had drained them; a seek, through its trigger).
-- p_walked: the lane was found by a queue-wide walk, whose fairness order
-- (ready_lanes.delivered_at, an indexed column) it then moves to the back;
-- a pop that names its partition leaves that order, and the row, alone.
-- Called from queen.pop only, whose plan_cache_mode setting it runs under.
CREATE OR REPLACE FUNCTION queen.pop_lane(
  q queen.queues, p_pid uuid, p_group text, p_max integer, p_lease uuid, p_lease_secs integer,
  p_auto_ack boolean, p_walked boolean)
RETURNS queen.lane_batch
LANGUAGE plpgsql AS $$
DECLARE
  lane record;
  v_batch queen.lane_batch;
  v_count integer;
  v_last bigint;
  v_head bigint;
BEGIN
  IF q.ttl = 0 THEN
    -- The claim and the read in one statement.
    SELECT l.next_seq, l.stored, l.head, l.pname, b.ids, b.transaction_ids, b.trace_ids, b.payloads,
           b.producer_subs, b.created_ats, b.n, b.last
      INTO lane
      FROM (SELECT CASE WHEN c.hold_until IS NULL THEN c.next_seq
                        ELSE queen.held_start(c.partition_id, c.next_seq, c.hold_until) END AS next_seq,
                   c.next_seq AS stored, p.next_seq AS head, p.name AS pname
              FROM queen.cursors c
              JOIN queen.partitions p ON p.id = c.partition_id
             WHERE c.partition_id = p_pid AND c.consumer_group = p_group
               -- A lease that expired, or a nack (retry_at), waits out retryDelay.
               AND (c.lease_expires_at IS NULL
                    OR c.lease_expires_at <= now() - make_interval(secs => q.retry_delay / 1000.0))
               AND (c.retry_at IS NULL OR c.retry_at <= now())
               AND (q.window_buffer = 0 OR p.last_push_at <= now() - make_interval(secs => q.window_buffer))
               AND (q.delayed_processing = 0 OR coalesce((
                     SELECT m.created_at FROM queen.messages m WHERE m.partition_id = c.partition_id AND m.seq >= c.next_seq
                      ORDER BY m.seq LIMIT 1) <= now() - make_interval(secs => q.delayed_processing), true))
               FOR UPDATE OF c SKIP LOCKED) l
      CROSS JOIN LATERAL queen.lane_messages(q, p_pid, l.next_seq, p_max) b;
    IF NOT FOUND THEN
      RETURN NULL;
    END IF;
    v_batch := (lane.pname, lane.ids, lane.transaction_ids, lane.trace_ids, lane.payloads, lane.producer_subs,
                lane.created_ats, lane.n, lane.last)::queen.lane_batch;
    v_count := lane.n;
    v_last := lane.last;
  ELSE
    SELECT CASE WHEN c.hold_until IS NULL THEN c.next_seq
                ELSE queen.held_start(c.partition_id, c.next_seq, c.hold_until) END AS next_seq,
           c.next_seq AS stored, p.next_seq AS head, p.name AS pname
      INTO lane
      FROM queen.cursors c
      JOIN queen.partitions p ON p.id = c.partition_id
     WHERE c.partition_id = p_pid AND c.consumer_group = p_group
       AND (c.lease_expires_at IS NULL
            OR c.lease_expires_at <= now() - make_interval(secs => q.retry_delay / 1000.0))
       AND (c.retry_at IS NULL OR c.retry_at <= now())
       AND (q.window_buffer = 0 OR p.last_push_at <= now() - make_interval(secs => q.window_buffer))
       AND (q.delayed_processing = 0 OR coalesce((
             SELECT m.created_at FROM queen.messages m WHERE m.partition_id = c.partition_id AND m.seq >= c.next_seq
              ORDER BY m.seq LIMIT 1) <= now() - make_interval(secs => q.delayed_processing), true))
       FOR UPDATE OF c SKIP LOCKED;
    IF NOT FOUND THEN
      RETURN NULL;
    END IF;
    -- ttl: messages older than it are never delivered. created_at rises
    -- with seq in a partition, so they are the lane's head: the cursor moves
    -- past them (we hold its lock), for this group, for good.
    IF lane.next_seq < lane.head THEN
      v_head := coalesce((SELECT m.seq FROM queen.messages m
                           WHERE m.partition_id = p_pid AND m.seq >= lane.next_seq
                             AND m.created_at > now() - make_interval(secs => q.ttl)
                           ORDER BY m.seq LIMIT 1), lane.head);
      IF v_head > lane.next_seq THEN
        UPDATE queen.cursors SET next_seq = v_head WHERE partition_id = p_pid AND consumer_group = p_group;
        lane.next_seq := v_head;
      END IF;
    END IF;
    IF lane.next_seq < lane.head THEN
      SELECT lane.pname, b.ids, b.transaction_ids, b.trace_ids, b.payloads, b.producer_subs, b.created_ats,
             b.n, b.last
        INTO v_batch
        FROM queen.lane_messages(q, p_pid, lane.next_seq, p_max) b;
      v_count := v_batch.n;
      v_last := v_batch.last;
    ELSE
      v_count := 0;
    END IF;
  END IF;

  -- A held head skipped on a drained lane moves the cursor for good, so a
  -- later push finds it at the lane's end and marks the lane ready.
  IF v_count = 0 AND lane.next_seq > lane.stored AND lane.next_seq >= lane.head THEN
    UPDATE queen.cursors SET next_seq = lane.next_seq WHERE partition_id = p_pid AND consumer_group = p_group;
  END IF;
  IF v_count = 0 AND lane.next_seq >= lane.head THEN
    SELECT p.next_seq INTO v_head FROM queen.partitions p WHERE p.id = p_pid FOR SHARE SKIP LOCKED;
    IF v_head IS NOT NULL AND lane.next_seq >= v_head THEN
      DELETE FROM queen.ready_lanes WHERE partition_id = p_pid AND consumer_group = p_group;
    END IF;
    RETURN NULL;
  END IF;

  IF v_count = 0 THEN
    -- Nothing left at or after the cursor (deleted messages leave holes):
    -- move the cursor to the lane's end so the lane stops being claimed.
    IF NOT EXISTS (SELECT 1 FROM queen.messages m WHERE m.partition_id = p_pid AND m.seq >= lane.next_seq) THEN
      UPDATE queen.cursors c SET next_seq = p.next_seq, lease_id = NULL, lease_expires_at = NULL, batch_end = NULL
        FROM queen.partitions p
       WHERE p.id = c.partition_id AND c.partition_id = p_pid AND c.consumer_group = p_group;
    END IF;
    RETURN NULL;
  END IF;

  IF p_auto_ack THEN
    UPDATE queen.cursors SET next_seq = v_last + 1, last_delivered_at = now(),
           lease_id = NULL, lease_expires_at = NULL, batch_end = NULL, retry_count = 0,
           hold_until = queen.hold_left(hold_until)
     WHERE partition_id = p_pid AND consumer_group = p_group;
  ELSIF lane.next_seq > lane.stored THEN
    -- A held head was skipped: for good, as the lease starts after it.
    UPDATE queen.cursors SET next_seq = lane.next_seq, lease_id = p_lease,
           lease_expires_at = now() + make_interval(secs => p_lease_secs),
           batch_end = v_last + 1, last_delivered_at = now(), hold_until = queen.hold_left(hold_until)
     WHERE partition_id = p_pid AND consumer_group = p_group;
  ELSE
    UPDATE queen.cursors SET lease_id = p_lease,
           lease_expires_at = now() + make_interval(secs => p_lease_secs),
           batch_end = v_last + 1, last_delivered_at = now()
     WHERE partition_id = p_pid AND consumer_group = p_group;
  END IF;
  -- The lane goes to the back of the fairness order.
  IF p_walked THEN
    UPDATE queen.ready_lanes SET delivered_at = now() WHERE partition_id = p_pid AND consumer_group = p_group;
  END IF;
  RETURN v_batch;
END $$;

-- POST /api/v1/lease/:leaseId/extend. Always an answer, never an error:
-- a lease that is gone renews nothing and reports a null expiry. Answers
-- how many lanes it renewed and until when; the engine writes the answer
-- (queen_wire::LeaseRenewal).
CREATE OR REPLACE FUNCTION queen.extend_lease(p_lease text, p_seconds integer,
                                              OUT renewed integer, OUT expires_at text)
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $$
DECLARE
  v_lease uuid;
  v_qid bigint;
  v_count integer := 0;
  v_expires timestamptz;
BEGIN
  IF p_seconds IS NULL OR p_seconds < 1 THEN
    PERFORM queen.bad_request('seconds', 'must be a positive integer');
  END IF;
  IF p_lease ~* '^[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}$' THEN
    v_lease := p_lease::uuid;
    v_qid := queen.lease_queue_id(v_lease);
  END IF;
  IF v_lease IS NOT NULL THEN
    WITH lanes AS (
      UPDATE queen.cursors c SET lease_expires_at = now() + make_interval(secs => p_seconds)
       WHERE c.queue_id = v_qid AND c.lease_id = v_lease AND c.lease_expires_at > now()
      RETURNING c.lease_expires_at
    )
    SELECT count(*), max(l.lease_expires_at) INTO v_count, v_expires FROM lanes l;
  END IF;
  renewed := v_count;
  expires_at := queen.iso(v_expires);
END $$;

-- The common batch of pops in one pass (queen.pop_requests): every member
-- names an existing partition of an existing queue without ttl, window
-- buffer or delay, leases (no auto-ack) under a registered group, and no
-- two members name one lane. Then each member's answer is the one
-- queen.pop gives it alone, but the batch claims its lanes (FOR UPDATE
-- SKIP LOCKED), reads their messages and leases them in three statements
-- whatever its size. A lane claimed with nothing to give goes through
-- queen.pop_lane (drained-lane and hole rules). Answers index-aligned with
-- the arrays, NULL where a member got nothing; NULL when the batch is not
-- of that shape: the caller pops member by member.
CREATE OR REPLACE FUNCTION queen.pop_named_batch(
  p_queues text[], p_partitions text[], p_groups text[], p_batches integer[], p_partition_counts integer[],
  p_lease_seconds integer[], p_auto_acks boolean[], p_key_id text)
RETURNS queen.popped[]
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $$
DECLARE
  v_n integer := cardinality(p_queues);
  v_ok boolean;
  v_answers queen.popped[];
  r record;
  q queen.queues;
  v_pids uuid[] := '{}';
  v_groups text[] := '{}';
  v_leases uuid[] := '{}';
  v_lsecs integer[] := '{}';
  v_lasts bigint[] := '{}';
BEGIN
  IF v_n < 2 OR array_position(p_partitions, NULL) IS NOT NULL OR true = ANY (p_auto_acks)
     OR EXISTS (SELECT 1 FROM unnest(p_batches, p_partition_counts, p_lease_seconds) u(b, pc, ls)
                 WHERE b IS NULL OR b < 1 OR pc IS NULL OR pc < 1 OR ls < 1) THEN
    RETURN NULL;
  END IF;
  -- Every member resolved, registered, of the plain queue shape, its key
  -- this broker's, on a lane of its own; the pop switch on.
  SELECT count(*) = v_n AND count(DISTINCT (e.pid, e.g)) = v_n
         AND NOT EXISTS (SELECT 1 FROM queen.maintenance_switches WHERE pop_paused)
    INTO v_ok
    FROM (SELECT p.id AS pid, coalesce(nullif(u.grp, ''), queen.queue_mode()) AS g
            FROM unnest(p_queues, p_partitions, p_groups) u(queue, part, grp)
            CROSS JOIN LATERAL (SELECT q0.* FROM queen.queues q0 WHERE q0.name = u.queue) q0
            CROSS JOIN LATERAL (SELECT p.id FROM queen.partitions p
                                 WHERE p.queue_id = q0.id AND p.name = u.part) p
           WHERE q0.ttl = 0 AND q0.window_buffer = 0 AND q0.delayed_processing = 0
             AND (q0.encryption_key_id IS NULL OR q0.encryption_key_id = p_key_id)
             AND EXISTS (SELECT 1 FROM queen.consumer_groups cg
                          WHERE cg.queue_name = u.queue AND cg.name = coalesce(nullif(u.grp, ''), queen.queue_mode()))) e;
  IF NOT v_ok THEN
    RETURN NULL;
  END IF;
  -- A lease is soft state (see queen.pop): no member auto-acks or registers.
  IF pg_current_xact_id_if_assigned() IS NULL THEN
    PERFORM set_config('synchronous_commit', 'off', true);
  END IF;

  v_answers := array_fill(NULL::queen.popped, ARRAY[v_n]);
  FOR r IN
    WITH members AS (
      SELECT u.ord, qq.q0 AS qrow, (qq.q0).id AS qid, (qq.q0).name AS qname, (qq.q0).retry_delay, p.id AS pid,
             p.name AS pname, coalesce(nullif(u.grp, ''), queen.queue_mode()) AS g, u.batch,
             coalesce(u.lsecs, (qq.q0).lease_time) AS lsecs, queen.lease_id_for((qq.q0).id) AS lease
        FROM unnest(p_queues, p_partitions, p_groups, p_batches, p_lease_seconds)
             WITH ORDINALITY u(queue, part, grp, batch, lsecs, ord)
        -- Lateral lookups: index probes per member whatever the tables'
        -- sizes were when the generic plan was made.
        CROSS JOIN LATERAL (SELECT q0 FROM queen.queues q0 WHERE q0.name = u.queue) qq
        CROSS JOIN LATERAL (SELECT p.id, p.name FROM queen.partitions p
                             WHERE p.queue_id = (qq.q0).id AND p.name = u.part) p
    ), claimed AS (
      SELECT m.*, c.next_seq, pt.next_seq AS head
        FROM members m
        CROSS JOIN LATERAL (SELECT CASE WHEN c.hold_until IS NULL THEN c.next_seq
                                        ELSE queen.held_start(c.partition_id, c.next_seq, c.hold_until)
                                   END AS next_seq
                              FROM queen.cursors c
                             WHERE c.partition_id = m.pid AND c.consumer_group = m.g
                               AND (c.lease_expires_at IS NULL
                                    OR c.lease_expires_at <= now() - make_interval(secs => m.retry_delay / 1000.0))
                               AND (c.retry_at IS NULL OR c.retry_at <= now())
                               FOR UPDATE OF c SKIP LOCKED) c
        CROSS JOIN LATERAL (SELECT pt.next_seq FROM queen.partitions pt WHERE pt.id = m.pid) pt
    )
    SELECT cl.ord, cl.qrow, cl.qname, cl.pid, cl.pname, cl.g, cl.lease, cl.lsecs, cl.batch, b.*
      FROM claimed cl
      CROSS JOIN LATERAL queen.lane_messages(cl.qrow, cl.pid, cl.next_seq, cl.batch) b
  LOOP
    IF r.n > 0 THEN
      v_answers[r.ord] := (r.qname, r.lease, r.g, ARRAY[r.pid], ARRAY[r.pname], ARRAY[r.n], r.ids,
                           r.transaction_ids, r.trace_ids, r.payloads, r.producer_subs, r.created_ats)::queen.popped;
      v_pids := v_pids || r.pid;
      v_groups := v_groups || r.g;
      v_leases := v_leases || r.lease;
      v_lsecs := v_lsecs || r.lsecs;
      v_lasts := v_lasts || r.last;
    ELSE
      -- Nothing to give: the lane's own rules (its ready row, holes).
      q := r.qrow;
      PERFORM queen.pop_lane(q, r.pid, r.g, r.batch, r.lease, r.lsecs, false, false);
    END IF;
  END LOOP;
  -- The leases of the lanes that gave messages, in one statement.
  UPDATE queen.cursors c
     SET lease_id = l.lease, lease_expires_at = now() + make_interval(secs => l.lsecs),
         batch_end = l.last + 1, last_delivered_at = now()
    FROM unnest(v_pids, v_groups, v_leases, v_lsecs, v_lasts) l(pid, g, lease, lsecs, last)
   WHERE c.partition_id = l.pid AND c.consumer_group = l.g;
  RETURN v_answers;
END $$;

-- Engine::pop_wait under a queue's minPopWaitTime: how many messages the
-- group could take now (at most p_cap), counted from its cursors on lanes no
-- live lease holds; NULL when it has no cursor there yet. An estimate for
-- the fill wait only: delays, windows and ttl stay the pop's to judge.
CREATE OR REPLACE FUNCTION queen.pop_backlog(p_queue text, p_partition text, p_group text, p_cap integer)
RETURNS integer
LANGUAGE sql STABLE AS $$
  SELECT least(sum(greatest(p.next_seq - c.next_seq, 0)), p_cap)::integer
    FROM queen.queues q
    JOIN queen.cursors c ON c.queue_id = q.id AND c.consumer_group = p_group
    JOIN queen.partitions p ON p.id = c.partition_id
   WHERE q.name = p_queue AND (p_partition IS NULL OR p.name = p_partition)
     AND (c.lease_id IS NULL OR c.lease_expires_at <= now())
$$;

-- The entry point of the pop routes: the maintenance switch, then the
-- operation. A paused pop is simply empty (a paused push is a 503 with
-- Retry-After, raised by queen.push_rows; clients resend it).
-- p_key_id: the fingerprint of this broker's encryption key (NULL: none). An
-- encrypted queue sealed with another key is refused before anything is
-- leased or committed, so no pop takes what its broker cannot open.
CREATE OR REPLACE FUNCTION queen.pop_api(
  p_queue text, p_partition text, p_group text, p_batch integer, p_partitions integer,
  p_lease_seconds integer, p_auto_ack boolean, p_sub_mode text, p_sub_from text, p_key_id text)
RETURNS queen.popped
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $$
DECLARE
  v_paused boolean;
  v_mismatch boolean;
BEGIN
  -- The pop switch, and the queue's key: a queue that was ever encrypted
  -- keeps its key id (and may hold sealed payloads after encryption is
  -- turned off), so it takes its key to pop. One statement for both.
  SELECT EXISTS (SELECT 1 FROM queen.maintenance_switches WHERE pop_paused),
         EXISTS (SELECT 1 FROM queen.queues q WHERE q.name = p_queue AND q.encryption_key_id IS NOT NULL
                    AND q.encryption_key_id IS DISTINCT FROM p_key_id)
    INTO v_paused, v_mismatch;
  IF v_paused THEN
    RETURN NULL;
  END IF;
  IF v_mismatch THEN
    PERFORM queen.encryption_key_mismatch(p_queue);
  END IF;
  RETURN queen.pop(p_queue, p_partition, p_group, p_batch, p_partitions, p_lease_seconds, p_auto_ack,
                   p_sub_mode, p_sub_from);
END $$;

-- Several queue pops in one statement and one commit (pop.rs): each
-- member runs queen.pop_api, as it would alone, in arrival order, so members
-- on one lane see each other as serial pops would (a leased lane gives the
-- next member nothing; an auto-acked one gives it the following messages).
-- One row per member, in the arrays' order, all NULL where a member got
-- nothing. A member's error (bad input, a key mismatch) fails the
-- statement, and the engine then runs each member alone.
--
-- The commit waits for the flush unless every member only took leases:
-- queen.pop switches the flush off for the first leasing member (see
-- there), so the setting this call found is put back when any member
-- auto-acked or registered a group.
CREATE OR REPLACE FUNCTION queen.pop_requests(
  p_queues text[], p_partitions text[], p_groups text[], p_batches integer[], p_partition_counts integer[],
  p_lease_seconds integer[], p_auto_acks boolean[], p_sub_modes text[], p_sub_froms text[], p_key_id text)
RETURNS SETOF queen.popped
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $$
DECLARE
  v_answers queen.popped[];
  v_flush text := current_setting('synchronous_commit');
  v_auto_acked boolean := false;
BEGIN
  -- The common shape (named lanes, leases, registered groups) in one pass.
  v_answers := queen.pop_named_batch(p_queues, p_partitions, p_groups, p_batches, p_partition_counts,
                                     p_lease_seconds, p_auto_acks, p_key_id);
  IF v_answers IS NULL THEN
    v_answers := array_fill(NULL::queen.popped, ARRAY[cardinality(p_queues)]);
    FOR i IN 1 .. cardinality(p_queues) LOOP
      v_answers[i] := queen.pop_api(p_queues[i], p_partitions[i], p_groups[i], p_batches[i],
        p_partition_counts[i], p_lease_seconds[i], p_auto_acks[i], p_sub_modes[i], p_sub_froms[i], p_key_id);
      v_auto_acked := v_auto_acked OR p_auto_acks[i];
    END LOOP;
    IF v_auto_acked OR current_setting('queen.group_registered', true) = 'on' THEN
      PERFORM set_config('synchronous_commit', v_flush, true);
    END IF;
  END IF;
  FOR i IN 1 .. cardinality(v_answers) LOOP
    RETURN NEXT v_answers[i];
  END LOOP;
END $$;

-- GET /api/v1/pop?namespace=&task=: a pop from the queues carrying that
-- namespace and/or task (configure sets them). Higher `priority` first;
-- among equals a random order, so a busy queue cannot starve its peers.
-- The first queue that delivers answers (its own pop answer); NULL when
-- none does. An encrypted queue this broker cannot open is skipped.
CREATE OR REPLACE FUNCTION queen.pop_matching(
  p_namespace text, p_task text, p_group text, p_batch integer, p_partitions integer,
  p_lease_seconds integer, p_auto_ack boolean, p_sub_mode text, p_sub_from text, p_key_id text)
RETURNS queen.popped
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $$
DECLARE
  r record;
  v_found queen.popped;
BEGIN
  IF p_namespace IS NULL AND p_task IS NULL THEN
    PERFORM queen.bad_request('namespace', 'or task is required');
  END IF;
  IF EXISTS (SELECT 1 FROM queen.maintenance_switches WHERE pop_paused) THEN
    RETURN NULL;
  END IF;
  FOR r IN
    SELECT q.name FROM queen.queues q
     WHERE (p_namespace IS NULL OR q.namespace = p_namespace)
       AND (p_task IS NULL OR q.task = p_task)
       AND (q.encryption_key_id IS NULL OR q.encryption_key_id IS NOT DISTINCT FROM p_key_id)
     ORDER BY q.priority DESC, random()
  LOOP
    v_found := queen.pop(r.name, NULL, p_group, p_batch, p_partitions, p_lease_seconds, p_auto_ack,
                         p_sub_mode, p_sub_from);
    IF v_found.queue IS NOT NULL THEN
      RETURN v_found;
    END IF;
  END LOOP;
  RETURN NULL;
END $$;
