-- POST /api/v1/push, and the push half of a transaction, a fired timer and
-- a stream cycle.
--
-- queen.push_rows is the push: the engine has decoded and checked every
-- item (crates/queen-engine/src/push.rs) and passes typed arrays, one
-- element per item. What stays here needs the database: queue and
-- partition creation, partition locks, offsets, the dedup window, maxSize
-- and the maintenance switch.
--
-- Cost: linear in the items and flat in the partitions of the batch and of
-- the queue. Every step is one set-based statement over the batch's lanes
-- (its distinct (queue, partition) pairs) or its items; per-lane values
-- travel in arrays indexed by lane number, so no statement joins two
-- derived sets (a prepared statement's generic plan estimates such sets at
-- a handful of rows and joins them by a nested loop, quadratic in the
-- batch). Tables are only reached through index lookups.
--
-- Locks, in this order (docs/design/push.md): creating partitions first
-- (the queue's registration advisory lock, shared, and its row FOR SHARE,
-- so a concurrent group registration sees the new lanes; then the inserts
-- in (queue id, name) order), then every target partition row FOR NO KEY
-- UPDATE in id order, held to commit: offsets commit in order and the
-- dedup check cannot race. A batch holds no partition lock while it
-- creates, so batches running side by side cannot deadlock.
--
-- Ready lanes (migration 0005): a lane the push gives a backlog gets its
-- queen.ready_lanes row here, in the push's statement, for each cursor that
-- had drained the lane before it (a lane with a backlog already has its
-- row, and a pop removes a row only after taking the partition's lock).
--
-- No NOTIFY: a notifying transaction holds a cluster-wide lock through its
-- commit's WAL flush, which serialises every pushing commit. The engine
-- wakes its own long polls after the commit and tells other brokers with
-- one coalesced notification outside this transaction (`queued` lists the
-- queues that received a message).

-- Marks the lanes of these partitions ready for every cursor that had
-- consumed up to `p_from` (the partition's offset before the push), so
-- that queue-wide pops find them. For writers that append outside
-- queen.push_rows.
CREATE OR REPLACE FUNCTION queen.mark_ready(p_pids uuid[], p_from bigint[]) RETURNS void
LANGUAGE sql AS $$
  INSERT INTO queen.ready_lanes (partition_id, consumer_group, queue_id, delivered_at)
  SELECT c.partition_id, c.consumer_group, c.queue_id, c.last_delivered_at
    FROM unnest(p_pids, p_from) u(pid, from_seq)
    JOIN queen.cursors c ON c.partition_id = u.pid AND c.next_seq >= u.from_seq
  ON CONFLICT DO NOTHING
$$;

-- p_requests numbers the request each item came from when the engine's push
-- batcher sends several requests in one call (NULL: one request): maxSize
-- then judges each request in turn, as if they had come one after another.
-- p_ids gives an item the message id promised to it earlier (a fired timer);
-- NULL, or a NULL element, draws a new one.
-- Encryption at rest: every payload bound for an encryptionEnabled queue
-- must arrive sealed by the engine with the queue's key (queen.sealed_with);
-- one sealed with another key raises QN500, an unsealed one QN409
-- (queen.encryption_changed: the engine's hint was stale, it retries), unless
-- p_unsealed_ok. The flag is read in a statement that starts after the
-- partition locks are held, and queen.configure, turning encryption on,
-- locks every partition of the queue: a push either commits before the
-- switch (its rows are then sealed by the engine's pass after the
-- configure, sealing.rs) or sees the flag. Reading it with the lock, in one
-- statement, would read it as of that statement's start, before the wait.
-- p_subs: each item's producer identity (the pushing token's `sub`), set by
-- the engine from the authenticated caller, never from a request body.
-- p_new_txids: the transaction id the engine drew for an item that came
-- without one (a NULL element: the item has its own, or this call draws
-- one). A drawn id is new, so it skips the dedup lookup. p_tails: the
-- random low 64 bits of each new message id, drawn by the engine (NULL:
-- drawn here). Drawing both in Rust spares every item two calls of the
-- OpenSSL-backed gen_random_uuid() and a PL/pgSQL call.
-- The answer is typed columns: `ids` (each item's message id, a
-- duplicate's that of its first occurrence, NULL when refused), `verdicts`
-- (one character per item: q queued, d duplicate, f refused by maxSize)
-- and `queued` (the queues that received a message). Each caller writes
-- its own answer from them: the engine the 201 body (push.rs
-- `PushColumns::answer`, also a stream cycle's push_results), a bundle its
-- push results, the timer sweeper its outcome.
CREATE OR REPLACE FUNCTION queen.push_rows(
  v_queues text[], v_parts text[], p_txids text[], v_traces text[], v_payloads text[],
  p_requests integer[], p_ids uuid[] DEFAULT NULL, p_unsealed_ok boolean DEFAULT false,
  p_subs text[] DEFAULT NULL, p_new_txids text[] DEFAULT NULL, p_tails bigint[] DEFAULT NULL,
  OUT queued text[], OUT ids uuid[], OUT verdicts text)
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $$
DECLARE
  -- Either path's answer (a call of it is a simple expression: no executor
  -- start-up).
  v_path record;
BEGIN
  IF coalesce(array_length(v_queues, 1), 0) = 0 THEN
    ids := '{}';
    verdicts := '';
    RETURN;
  END IF;
  IF EXISTS (SELECT 1 FROM queen.maintenance_switches WHERE push_paused) THEN
    RAISE EXCEPTION USING ERRCODE = 'QN503', MESSAGE = json_build_object('error',
      'push is paused for maintenance; retry later', 'code', 'maintenance')::text;
  END IF;

  -- The common push, every item to one lane, takes the one-lane path
  -- (queen.push_lane); it declines a lane that does not exist yet or a
  -- queue with maxSize, which the general path (queen.push_lanes) handles.
  IF v_queues[1] = ALL (v_queues) AND v_parts[1] = ALL (v_parts) THEN
    v_path := queen.push_lane(v_queues[1], v_parts[1], p_txids, v_traces, v_payloads, p_ids, p_unsealed_ok, p_subs,
                              p_new_txids, p_tails);
    IF v_path.handled THEN
      queued := v_path.queued; ids := v_path.ids; verdicts := v_path.verdicts;
      RETURN;
    END IF;
  END IF;
  v_path := queen.push_lanes(v_queues, v_parts, p_txids, v_traces, v_payloads, p_requests, p_ids, p_unsealed_ok,
                             p_subs, p_new_txids, p_tails);
  queued := v_path.queued; ids := v_path.ids; verdicts := v_path.verdicts;
END $$;

-- The one-lane path of queen.push_rows: every item to one partition that
-- exists, of a queue without maxSize. Two statements: lock the partition
-- (and read its offset), then dedup, insert, bump and mark ready in one.
-- Declines (handled false, the partition lock kept) a lane that does not
-- exist or has maxSize. Both paths run under push_rows' generic plans
-- (its SET reaches the functions it calls), so they carry no SET, whose
-- save and restore every call would pay.
CREATE OR REPLACE FUNCTION queen.push_lane(
  p_queue text, p_part text, p_txids text[], v_traces text[], v_payloads text[], p_ids uuid[],
  p_unsealed_ok boolean, p_subs text[], p_new_txids text[], p_tails bigint[],
  OUT queued text[], OUT ids uuid[], OUT verdicts text, OUT handled boolean)
LANGUAGE plpgsql AS $$
DECLARE
  v_pid uuid;
  v_qid bigint;
  v_fault text;
  v_win integer;
  v_max_size integer;
  v_next bigint;
  v_clock bigint;
  v_at timestamptz;
BEGIN
  handled := false;
  -- The encryption flag is not read here: this statement's snapshot is
  -- older than the lock it may wait for (see "Encryption at rest").
  SELECT p.id, p.queue_id, p.next_seq, greatest(now(), p.last_push_at), p.id_clock, q.dedup_window_seconds,
         q.max_size
    INTO v_pid, v_qid, v_next, v_at, v_clock, v_win, v_max_size
    FROM queen.queues q JOIN queen.partitions p ON p.queue_id = q.id
   WHERE q.name = p_queue AND p.name = p_part
     FOR NO KEY UPDATE OF p;
  IF v_pid IS NOT NULL AND v_max_size = 0 THEN
    v_clock := queen.id_clock_start(v_at, v_clock);
    WITH items AS (
      SELECT u.ord, u.txid, u.trace, u.payload, u.ord = u.first_ord AS first,
             -- A transaction id the engine drew is new: no dedup lookup.
             CASE WHEN NOT u.drawn AND u.ord = u.first_ord THEN
               (SELECT m.id FROM queen.messages m
                 WHERE m.partition_id = v_pid AND m.transaction_id = u.txid
                   AND m.created_at > now() - make_interval(secs => v_win)
                 ORDER BY m.seq DESC LIMIT 1) END AS prior
        FROM (SELECT x.*, min(x.ord) OVER (PARTITION BY x.txid COLLATE "C") AS first_ord
                FROM (SELECT coalesce(t, p_new_txids[n::integer], queen.uuid_v7()::text) AS txid,
                             t IS NULL AS drawn, tr AS trace, pl AS payload, n AS ord
                        FROM unnest(p_txids, v_traces, v_payloads) WITH ORDINALITY x(t, tr, pl, n)) x) u
    ),
    decided AS MATERIALIZED (
      SELECT d.*,
             CASE WHEN d.is_fresh THEN coalesce(p_ids[d.ord::integer],
               queen.message_id(v_clock + d.rn, p_tails[d.ord::integer])) END AS new_id
        FROM (SELECT i.*, i.first AND i.prior IS NULL AS is_fresh,
                     count(*) FILTER (WHERE i.first AND i.prior IS NULL) OVER (ORDER BY i.ord) - 1 AS rn
                FROM items i) d
    ),
    ins AS (
      INSERT INTO queen.messages (partition_id, seq, id, transaction_id, trace_id, payload, created_at,
                                  producer_sub)
      SELECT v_pid, v_next + f.rn, f.new_id, f.txid, f.trace, f.payload::json, v_at, p_subs[f.ord::integer]
        FROM decided f WHERE f.is_fresh
    ),
    -- Data-modifying CTEs always run to completion, read or not.
    bump AS (
      UPDATE queen.partitions p
         SET next_seq = v_next + c.n, last_push_at = v_at, id_clock = v_clock + c.n - 1
        FROM (SELECT count(*) AS n FROM decided WHERE is_fresh) c
       WHERE p.id = v_pid AND c.n > 0
      RETURNING 1
    ),
    ready AS (
      INSERT INTO queen.ready_lanes (partition_id, consumer_group, queue_id, delivered_at)
      SELECT c.partition_id, c.consumer_group, c.queue_id, c.last_delivered_at
        FROM queen.cursors c
       WHERE c.partition_id = v_pid AND c.next_seq >= v_next AND EXISTS (SELECT 1 FROM decided WHERE is_fresh)
      ON CONFLICT DO NOTHING
    ),
    -- A duplicate answers the id of its transaction id's first occurrence
    -- (in this call, or stored): a window, not a join of two CTEs.
    answered AS (
      SELECT d.ord, d.txid, d.is_fresh, d.payload,
             first_value(coalesce(d.new_id, d.prior)) OVER (PARTITION BY d.txid COLLATE "C" ORDER BY d.ord)
               AS message_id
        FROM decided d
    ),
    -- The flag as of the partition lock (this statement's snapshot is
    -- newer than the lock): a configure that turned encryption on has
    -- committed before we got the lock, or waits for our commit.
    sealer AS (
      SELECT CASE WHEN q.encryption_enabled AND NOT p_unsealed_ok THEN q.encryption_key_id END AS k
        FROM queen.queues q WHERE q.id = v_qid
    )
    SELECT CASE WHEN bool_or(a.is_fresh) THEN ARRAY[p_queue] END,
           array_agg(a.message_id ORDER BY a.ord),
           string_agg(CASE WHEN a.is_fresh THEN 'q' ELSE 'd' END, '' ORDER BY a.ord),
           string_agg(DISTINCT CASE WHEN queen.is_sealed(a.payload) THEN 'k' ELSE 'u' END, '')
             FILTER (WHERE s.k IS NOT NULL AND NOT queen.sealed_with(a.payload, s.k))
      INTO queued, ids, verdicts, v_fault
      FROM answered a LEFT JOIN sealer s ON true;
    -- Raising rolls back what this statement wrote.
    IF strpos(v_fault, 'k') > 0 THEN
      PERFORM queen.encryption_key_mismatch(p_queue);
    ELSIF v_fault <> '' THEN
      PERFORM queen.encryption_changed(ARRAY[p_queue]);
    END IF;
    handled := true;
  END IF;
END $$;

-- The general path of queen.push_rows: any number of lanes, created on
-- first push, maxSize judged per request.
CREATE OR REPLACE FUNCTION queen.push_lanes(
  v_queues text[], v_parts text[], p_txids text[], v_traces text[], v_payloads text[],
  p_requests integer[], p_ids uuid[], p_unsealed_ok boolean, p_subs text[], p_new_txids text[], p_tails bigint[],
  OUT queued text[], OUT ids uuid[], OUT verdicts text)
LANGUAGE plpgsql AS $$
DECLARE
  v_full text[] := '{}';
  r record;
  v_key_id text;
  v_unsealed text[];
  v_backlog bigint;
  rq record;
  -- Per item: its lane's number (1-based, lanes in name order).
  v_lane integer[];
  -- Per lane, indexed by lane number.
  l_queue text[];
  l_part text[];
  l_qid bigint[];
  l_pid uuid[];
  l_win integer[];
  l_key text[];
  l_max integer[];
  l_next bigint[];
  l_at timestamptz[];
  l_clock bigint[];
  v_tries integer := 0;
BEGIN
  -- Lanes: the batch's distinct (queue, partition) pairs, numbered in name
  -- order (bytewise: "C" sorts without the locale's cost); each item
  -- learns its lane's number.
  SELECT array_agg(x.lane ORDER BY x.n), array_agg(x.qn ORDER BY x.lane) FILTER (WHERE x.first),
         array_agg(x.pn ORDER BY x.lane) FILTER (WHERE x.first)
    INTO v_lane, l_queue, l_part
    FROM (SELECT u.n, u.qn, u.pn, dense_rank() OVER (ORDER BY u.qn COLLATE "C", u.pn COLLATE "C")::integer AS lane,
                 row_number() OVER (PARTITION BY u.qn COLLATE "C", u.pn COLLATE "C" ORDER BY u.n) = 1 AS first
            FROM unnest(v_queues, v_parts) WITH ORDINALITY u(qn, pn, n)) x;

  LOOP
    -- Resolve every lane by index lookups; a missing queue or partition
    -- leaves a NULL.
    SELECT array_agg(q.id ORDER BY u.i), array_agg(p.id ORDER BY u.i),
           array_agg(q.dedup_window_seconds ORDER BY u.i), array_agg(q.max_size ORDER BY u.i)
      INTO l_qid, l_pid, l_win, l_max
      FROM unnest(l_queue, l_part) WITH ORDINALITY u(qn, pn, i)
      LEFT JOIN queen.queues q ON q.name = u.qn
      LEFT JOIN queen.partitions p ON p.queue_id = q.id AND p.name = u.pn;
    EXIT WHEN array_position(l_pid, NULL) IS NULL;
    v_tries := v_tries + 1;
    IF v_tries > 3 THEN
      -- Created and deleted under us three times: let the client retry.
      RAISE EXCEPTION USING ERRCODE = '40001', MESSAGE = 'push: partitions kept disappearing; retry';
    END IF;

    -- Queues and partitions are created on first push, before any
    -- partition lock is taken (see the header).
    IF array_position(l_qid, NULL) IS NOT NULL THEN
      INSERT INTO queen.queues (name)
      SELECT u.qn FROM unnest(l_queue, l_qid) u(qn, qid) WHERE u.qid IS NULL
      ON CONFLICT (name) DO NOTHING;
    END IF;
    -- Pairs with the exclusive lock in queen.register_group: a group that
    -- registers while this call creates the queue itself cannot see the
    -- queue, so one of the two must wait for the other to commit.
    PERFORM pg_advisory_xact_lock_shared(1364542789, hashtext(d.qn))
       FROM (SELECT DISTINCT u.qn FROM unnest(l_queue, l_pid) u(qn, pid) WHERE u.pid IS NULL ORDER BY 1) d;
    PERFORM 1 FROM queen.queues q
      WHERE q.name IN (SELECT u.qn FROM unnest(l_queue, l_pid) u(qn, pid) WHERE u.pid IS NULL)
      ORDER BY q.id FOR SHARE;
    WITH created AS (
      INSERT INTO queen.partitions (queue_id, name)
      SELECT q.id, u.pn
        FROM unnest(l_queue, l_part, l_pid) u(qn, pn, pid)
        JOIN queen.queues q ON q.name = u.qn
       WHERE u.pid IS NULL
       ORDER BY q.id, u.pn
      ON CONFLICT (queue_id, name) DO NOTHING
      RETURNING id, queue_id
    )
    -- Every registered group gets a cursor; the lane is new, so it starts
    -- at 0 (its ready lane: the cursor's insert trigger, migration 0005),
    -- held until a subscription time still to come (queen.held_start).
    INSERT INTO queen.cursors (partition_id, consumer_group, queue_id, next_seq, hold_until)
    SELECT c.id, g.name, c.queue_id, 0,
           CASE WHEN g.subscription_mode = 'timestamp' AND g.subscription_from > now() THEN g.subscription_from END
      FROM created c
      JOIN queen.queues q ON q.id = c.queue_id
      JOIN queen.consumer_groups g ON g.queue_name = q.name
    ON CONFLICT DO NOTHING;
  END LOOP;

  -- Every target partition, locked in id order; its offset, push time and
  -- id clock as of the lock. A lane deleted meanwhile is resolved again.
  SELECT array_agg(x.next_seq ORDER BY x.i), array_agg(x.at ORDER BY x.i),
         array_agg(queen.id_clock_start(x.at, x.id_clock) ORDER BY x.i)
    INTO l_next, l_at, l_clock
    FROM (SELECT u.i, p.next_seq, greatest(now(), p.last_push_at) AS at, p.id_clock
            FROM unnest(l_pid) WITH ORDINALITY u(pid, i)
            JOIN queen.partitions p ON p.id = u.pid
           ORDER BY p.id
             FOR NO KEY UPDATE OF p) x;
  IF cardinality(l_next) IS DISTINCT FROM cardinality(l_pid) THEN
    RAISE EXCEPTION USING ERRCODE = '40001', MESSAGE = 'push: a partition was deleted under the push; retry';
  END IF;
  -- Each lane's encryption key as of its partition lock (a new snapshot,
  -- see "Encryption at rest"), never as of the resolve above.
  -- A subquery per lane: index lookups, never a scan of queen.queues.
  SELECT array_agg((SELECT CASE WHEN q.encryption_enabled THEN q.encryption_key_id END
                      FROM queen.queues q WHERE q.id = u.qid) ORDER BY u.i)
    INTO l_key
    FROM unnest(l_qid) WITH ORDINALITY u(qid, i);

  -- maxSize: the backlog of the queue-mode cursor may not pass the limit.
  -- Requests are judged in order; a refused one adds nothing to the backlog.
  -- v_full holds "queue <US> request" for each refused pair.
  IF EXISTS (SELECT 1 FROM unnest(l_max) m WHERE m > 0) THEN
    FOR r IN
      SELECT DISTINCT u.qid AS id, u.qn AS name, u.mx AS max_size
        FROM unnest(l_qid, l_queue, l_max) u(qid, qn, mx)
       WHERE u.mx > 0
    LOOP
      SELECT coalesce(sum(p.next_seq - coalesce(c.next_seq, 0)), 0) INTO v_backlog
        FROM queen.partitions p
        LEFT JOIN queen.cursors c ON c.partition_id = p.id AND c.consumer_group = queen.queue_mode()
       WHERE p.queue_id = r.id;
      FOR rq IN
        SELECT coalesce(u.req, 0) AS req, count(*) AS incoming
          FROM unnest(v_queues, p_requests) u(qn, req)
         WHERE u.qn = r.name
         GROUP BY 1 ORDER BY 1
      LOOP
        IF v_backlog + rq.incoming > r.max_size THEN
          v_full := v_full || (r.name || chr(31) || rq.req);
        ELSE
          v_backlog := v_backlog + rq.incoming;
        END IF;
      END LOOP;
    END LOOP;
  END IF;

  WITH items AS (
    SELECT u.*, min(u.ord) FILTER (WHERE NOT u.full) OVER (PARTITION BY u.lane, u.txid COLLATE "C") AS first_ord
      FROM (SELECT x.n AS ord, v_lane[x.n::integer] AS lane,
                   coalesce(x.t, p_new_txids[x.n::integer], queen.uuid_v7()::text) AS txid,
                   x.t IS NULL AS drawn, x.tr AS trace, x.pl AS payload,
                   cardinality(v_full) > 0
                     AND (v_queues[x.n::integer] || chr(31) || coalesce(x.rq, 0)) = ANY (v_full) AS full
              FROM unnest(p_txids, v_traces, v_payloads, p_requests) WITH ORDINALITY x(t, tr, pl, rq, n)) u
  ),
  probed AS (
    SELECT i.*,
           -- A transaction id the engine drew is new: no dedup lookup.
           CASE WHEN NOT i.drawn AND i.ord = i.first_ord THEN
             (SELECT m.id FROM queen.messages m
               WHERE m.partition_id = l_pid[i.lane] AND m.transaction_id = i.txid
                 AND m.created_at > now() - make_interval(secs => l_win[i.lane])
               ORDER BY m.seq DESC LIMIT 1) END AS prior_id,
           -- Encryption at rest (see the header): 'u' unsealed, 'k' another key.
           CASE WHEN l_key[i.lane] IS NOT NULL AND NOT p_unsealed_ok
                     AND NOT queen.sealed_with(i.payload, l_key[i.lane])
                THEN CASE WHEN queen.is_sealed(i.payload) THEN 'k' ELSE 'u' END END AS seal_fault
      FROM items i
  ),
  -- Every item with its verdict and, when it is new, the offset and id it
  -- is inserted with (from its lane's offset and id clock: both rise with
  -- offsets, migration 0008).
  decided AS MATERIALIZED (
    SELECT d.*,
           CASE WHEN d.is_fresh THEN coalesce(p_ids[d.ord::integer],
             queen.message_id(l_clock[d.lane] + d.rn, p_tails[d.ord::integer])) END AS new_id
      FROM (SELECT p.*, (p.ord = p.first_ord AND NOT p.full AND p.prior_id IS NULL) AS is_fresh,
                   count(*) FILTER (WHERE p.ord = p.first_ord AND NOT p.full AND p.prior_id IS NULL)
                     OVER (PARTITION BY p.lane ORDER BY p.ord) - 1 AS rn
              FROM probed p) d
  ),
  ins AS (
    INSERT INTO queen.messages (partition_id, seq, id, transaction_id, trace_id, payload, created_at,
                                producer_sub)
    SELECT l_pid[f.lane], l_next[f.lane] + f.rn, f.new_id, f.txid, f.trace, f.payload::json, l_at[f.lane],
           p_subs[f.ord::integer]
      FROM decided f
     WHERE f.is_fresh
  ),
  grown AS MATERIALIZED (
    SELECT f.lane, count(*) AS n FROM decided f WHERE f.is_fresh GROUP BY f.lane
  ),
  -- Data-modifying CTEs always run to completion, read or not.
  bump AS (
    UPDATE queen.partitions p
       SET next_seq = l_next[g.lane] + g.n, last_push_at = l_at[g.lane], id_clock = l_clock[g.lane] + g.n - 1
      FROM grown g
     WHERE p.id = l_pid[g.lane]
  ),
  ready AS (
    INSERT INTO queen.ready_lanes (partition_id, consumer_group, queue_id, delivered_at)
    SELECT c.partition_id, c.consumer_group, c.queue_id, c.last_delivered_at
      FROM grown g
      JOIN queen.cursors c ON c.partition_id = l_pid[g.lane] AND c.next_seq >= l_next[g.lane]
    ON CONFLICT DO NOTHING
  ),
  -- A duplicate inside the call answers the id of its first occurrence.
  answered AS (
    SELECT f.ord, f.lane, f.txid, f.full, f.is_fresh, f.seal_fault,
           first_value(coalesce(f.new_id, f.prior_id))
             OVER (PARTITION BY f.lane, f.txid COLLATE "C", f.full ORDER BY f.ord)
             AS message_id
      FROM decided f
  )
  SELECT array_agg(DISTINCT l_queue[a.lane]) FILTER (WHERE a.is_fresh),
         array_agg(DISTINCT l_queue[a.lane]) FILTER (WHERE a.seal_fault = 'u'),
         min(l_queue[a.lane]) FILTER (WHERE a.seal_fault = 'k'),
         array_agg(CASE WHEN NOT a.full THEN a.message_id END ORDER BY a.ord),
         string_agg(CASE WHEN a.full THEN 'f' WHEN a.is_fresh THEN 'q' ELSE 'd' END, '' ORDER BY a.ord)
    INTO queued, v_unsealed, v_key_id, ids, verdicts
    FROM answered a;
  -- Raising rolls back what this statement wrote.
  IF v_key_id IS NOT NULL THEN
    PERFORM queen.encryption_key_mismatch(v_key_id);
  ELSIF v_unsealed IS NOT NULL THEN
    PERFORM queen.encryption_changed(v_unsealed);
  END IF;
END $$;

-- The 1-based position of the first item push_rows did not queue (a
-- duplicate or a maxSize refusal) in its `verdicts`, NULL when all were
-- queued: callers that push all or nothing (a bundle, a stream cycle)
-- refuse on it. An expression, inlined: no statement of its own.
CREATE OR REPLACE FUNCTION queen.first_unqueued(p_verdicts text) RETURNS integer
LANGUAGE sql IMMUTABLE AS $$
  SELECT nullif(length(p_verdicts) - length(ltrim(p_verdicts, 'q')) + 1, length(p_verdicts) + 1)
$$;
