-- POST /api/v1/push, and the push half of a transaction.
--
-- queen.push_rows is the push: the engine has decoded and checked every
-- item (crates/queen-engine/src/push.rs) and passes typed arrays, one
-- element per item. What stays here needs the database: queue and
-- partition creation, partition locks, offsets, the dedup window, maxSize
-- and the maintenance switch.
--
-- Locks, in this order: the queue's registration advisory lock (shared)
-- and queue rows FOR SHARE (only when creating a partition, so a concurrent
-- group registration sees it, even of a queue this call creates), then the target
-- partition rows FOR NO KEY UPDATE in id order. The partition lock is held to
-- commit, so offsets commit in order and the dedup check cannot race.
--
-- No NOTIFY: a notifying transaction holds a cluster-wide lock through its
-- commit's WAL flush, which serialises every pushing commit. The engine
-- wakes its own long polls after the commit and tells other brokers with
-- one coalesced notification outside this transaction (`queued` lists the
-- queues that received a message).
DROP FUNCTION IF EXISTS queen.push_api(json);
-- The JSON entry point is gone: the engine checks items (push.rs) and passes arrays.
DROP FUNCTION IF EXISTS queen.push(json);
DROP FUNCTION IF EXISTS queen.push_rows(text[], text[], text[], text[], text[]);
DROP FUNCTION IF EXISTS queen.push_rows(text[], text[], text[], text[], text[], integer[]);
DROP FUNCTION IF EXISTS queen.push_rows(text[], text[], text[], text[], text[], integer[], uuid[]);
DROP FUNCTION IF EXISTS queen.push_rows(text[], text[], text[], text[], text[], integer[], uuid[], boolean);
DROP FUNCTION IF EXISTS queen.push_rows(text[], text[], text[], text[], text[], integer[], uuid[], boolean, text[]);
-- p_requests numbers the request each item came from when the engine's push
-- batcher sends several requests in one call (NULL: one request): maxSize
-- then judges each request in turn, as if they had come one after another.
-- p_ids gives an item the message id promised to it earlier (a fired timer);
-- NULL, or a NULL element, draws a new one.
-- Encryption at rest: every payload bound for an encryptionEnabled queue
-- must arrive sealed by the engine with the queue's key (queen.sealed_with);
-- one sealed with another key raises QN500, an unsealed one QN409
-- (queen.encryption_changed: the engine's hint was stale, it retries), unless
-- p_unsealed_ok (fired timers, whose payload the engine checked when it
-- was scheduled).
-- p_subs: each item's producer identity (the pushing token's `sub`), set by
-- the engine from the authenticated caller, never from a request body.
-- p_new_txids: the transaction id the engine drew for an item that came
-- without one (a NULL element: the item has its own, or this call draws
-- one). p_tails: the random low 64 bits of each new message id, drawn by the
-- engine (NULL: drawn here). Drawing both in Rust spares every item two
-- calls of the OpenSSL-backed gen_random_uuid() and a PL/pgSQL call.
-- p_lean: answer `ids` (each item's message id, NULL when refused) and
-- `verdicts` (one character per item: q queued, d duplicate, f refused by
-- maxSize) instead of the JSON `result`, which the engine then writes; the
-- JSON objects cost about a fifth of a 100-item push here.
CREATE OR REPLACE FUNCTION queen.push_rows(
  v_queues text[], v_parts text[], p_txids text[], v_traces text[], v_payloads text[],
  p_requests integer[], p_ids uuid[] DEFAULT NULL, p_unsealed_ok boolean DEFAULT false,
  p_subs text[] DEFAULT NULL, p_new_txids text[] DEFAULT NULL, p_tails bigint[] DEFAULT NULL,
  p_lean boolean DEFAULT false,
  OUT result json, OUT queued text[], OUT ids uuid[], OUT verdicts text)
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $$
DECLARE
  v_txids text[];
  v_full text[] := '{}';
  r record;
  v_pid uuid;
  v_win integer;
  v_max_size integer;
  v_next bigint;
  v_clock bigint;
  v_at timestamptz;
  v_key_id text;
  v_unsealed text[];
  v_backlog bigint;
  rq record;
BEGIN
  IF coalesce(array_length(v_queues, 1), 0) = 0 THEN
    IF p_lean THEN
      ids := '{}';
      verdicts := '';
    ELSE
      result := '[]'::json;
    END IF;
    RETURN;
  END IF;
  IF EXISTS (SELECT 1 FROM queen.maintenance_switches WHERE push_paused) THEN
    RAISE EXCEPTION USING ERRCODE = 'QN503', MESSAGE = json_build_object('error',
      'push is paused for maintenance; retry later', 'code', 'maintenance')::text;
  END IF;

  -- The common push: every item goes to one partition that exists, of a
  -- queue without maxSize. Three short statements: lock the partition (and
  -- read its offset), then dedup, insert and bump in one.
  IF v_queues[1] = ALL (v_queues) AND v_parts[1] = ALL (v_parts) THEN
    SELECT p.id, p.next_seq, greatest(now(), p.last_push_at), p.id_clock, q.dedup_window_seconds, q.max_size,
           CASE WHEN q.encryption_enabled THEN q.encryption_key_id END
      INTO v_pid, v_next, v_at, v_clock, v_win, v_max_size, v_key_id
      FROM queen.queues q JOIN queen.partitions p ON p.queue_id = q.id
     WHERE q.name = v_queues[1] AND p.name = v_parts[1]
       FOR NO KEY UPDATE OF p;
    IF v_key_id IS NOT NULL AND NOT p_unsealed_ok
       AND EXISTS (SELECT 1 FROM unnest(v_payloads) u(pl) WHERE NOT queen.sealed_with(u.pl, v_key_id)) THEN
      IF EXISTS (SELECT 1 FROM unnest(v_payloads) u(pl) WHERE queen.is_sealed(u.pl)) THEN
        PERFORM queen.encryption_key_mismatch(v_queues[1]);
      END IF;
      PERFORM queen.encryption_changed(ARRAY[v_queues[1]]);
    END IF;
    IF v_pid IS NOT NULL AND v_max_size = 0 THEN
      v_clock := queen.id_clock_start(v_at, v_clock);
      WITH items AS (
        SELECT u.ord, u.txid, u.trace, u.payload,
               min(u.ord) OVER (PARTITION BY u.txid) AS first_ord,
               -- A transaction id we draw here is new: no dedup lookup.
               CASE WHEN NOT u.drawn THEN
                 (SELECT m.id FROM queen.messages m
                   WHERE m.partition_id = v_pid AND m.transaction_id = u.txid
                     AND m.created_at > now() - make_interval(secs => v_win)
                   ORDER BY m.seq DESC LIMIT 1) END AS prior
          FROM (SELECT coalesce(t, p_new_txids[n::integer], queen.uuid_v7()::text) AS txid, t IS NULL AS drawn,
                       tr AS trace,
                       pl AS payload, n AS ord
                  FROM unnest(p_txids, v_traces, v_payloads) WITH ORDINALITY x(t, tr, pl, n)) u
      ),
      fresh AS (
        SELECT i.ord, i.txid, i.trace, i.payload, row_number() OVER (ORDER BY i.ord) - 1 AS rn
          FROM items i WHERE i.ord = i.first_ord AND i.prior IS NULL
      ),
      ins AS (
        INSERT INTO queen.messages (partition_id, seq, id, transaction_id, trace_id, payload, created_at,
                                    producer_sub)
        SELECT v_pid, v_next + f.rn, coalesce(p_ids[f.ord::integer], queen.message_id(v_clock + f.rn, p_tails[f.ord::integer])),
               f.txid, f.trace, f.payload::json, v_at, p_subs[f.ord::integer]
          FROM fresh f
        RETURNING transaction_id, id
      ),
      bump AS (
        UPDATE queen.partitions p
           SET next_seq = v_next + c.n, last_push_at = v_at, id_clock = v_clock + c.n - 1
          FROM (SELECT count(*) AS n FROM fresh) c
         WHERE p.id = v_pid AND c.n > 0
        RETURNING 1
      )
      -- FILTER skips the other answer's arguments, not only its result.
      SELECT json_agg(json_build_object('index', i.ord - 1, 'message_id', coalesce(ins.id, i.prior),
               'transaction_id', i.txid, 'queueName', v_queues[1],
               'status', CASE WHEN i.ord = i.first_ord AND i.prior IS NULL THEN 'queued' ELSE 'duplicate' END)
               ORDER BY i.ord) FILTER (WHERE NOT p_lean),
             CASE WHEN count(ins.id) > 0 THEN ARRAY[v_queues[1]] END,
             array_agg(coalesce(ins.id, i.prior) ORDER BY i.ord) FILTER (WHERE p_lean),
             string_agg(CASE WHEN i.ord = i.first_ord AND i.prior IS NULL THEN 'q' ELSE 'd' END, ''
                        ORDER BY i.ord) FILTER (WHERE p_lean)
        INTO result, queued, ids, verdicts
        FROM items i LEFT JOIN ins ON ins.transaction_id = i.txid;
      RETURN;
    END IF;
  END IF;

  SELECT array_agg(coalesce(t, p_new_txids[n::integer], queen.uuid_v7()::text) ORDER BY n) INTO v_txids
    FROM unnest(p_txids) WITH ORDINALITY u(t, n);

  -- Queues and partitions are created on first push.
  INSERT INTO queen.queues (name)
  SELECT DISTINCT u.qn FROM unnest(v_queues) u(qn)
   WHERE NOT EXISTS (SELECT 1 FROM queen.queues q WHERE q.name = u.qn)
  ON CONFLICT (name) DO NOTHING;

  FOR r IN
    SELECT DISTINCT q.id AS qid, q.name AS qname, u.pn
      FROM unnest(v_queues, v_parts) u(qn, pn)
      JOIN queen.queues q ON q.name = u.qn
     WHERE NOT EXISTS (SELECT 1 FROM queen.partitions p WHERE p.queue_id = q.id AND p.name = u.pn)
     ORDER BY q.id, u.pn
  LOOP
    -- Pairs with the exclusive lock in queen.register_group: a group that
    -- registers while this call creates the queue itself cannot see the
    -- queue, so one of the two must wait for the other to commit.
    PERFORM pg_advisory_xact_lock_shared(1364542789, hashtext(r.qname));
    PERFORM 1 FROM queen.queues WHERE id = r.qid FOR SHARE;
    v_pid := NULL;
    INSERT INTO queen.partitions (queue_id, name) VALUES (r.qid, r.pn)
    ON CONFLICT (queue_id, name) DO NOTHING
    RETURNING id INTO v_pid;
    IF v_pid IS NOT NULL THEN
      -- Every registered group gets a cursor; the lane is new, so it starts at 0.
      INSERT INTO queen.cursors (partition_id, consumer_group, queue_id, next_seq)
      SELECT v_pid, g.name, r.qid, 0 FROM queen.consumer_groups g WHERE g.queue_name = r.qname
      ON CONFLICT DO NOTHING;
    END IF;
  END LOOP;

  PERFORM 1
     FROM queen.partitions p
     JOIN queen.queues q ON q.id = p.queue_id
    WHERE (q.name, p.name) IN (SELECT DISTINCT u.qn, u.pn FROM unnest(v_queues, v_parts) u(qn, pn))
    ORDER BY p.id
    FOR NO KEY UPDATE OF p;

  -- maxSize: the backlog of the queue-mode cursor may not pass the limit.
  -- Requests are judged in order; a refused one adds nothing to the backlog.
  -- v_full holds "queue <US> request" for each refused pair.
  FOR r IN
    SELECT q.id, q.name, q.max_size
      FROM (SELECT DISTINCT u.qn FROM unnest(v_queues) u(qn)) u JOIN queen.queues q ON q.name = u.qn
     WHERE q.max_size > 0
  LOOP
    SELECT coalesce(sum(p.next_seq - coalesce(c.next_seq, 0)), 0) INTO v_backlog
      FROM queen.partitions p
      LEFT JOIN queen.cursors c ON c.partition_id = p.id AND c.consumer_group = '__QUEUE_MODE__'
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

  WITH judged AS (
    SELECT u.*, (u.qn || chr(31) || coalesce(u.req, 0)) = ANY (v_full) AS full
      FROM unnest(v_queues, v_parts, v_txids, v_traces, v_payloads, p_requests)
           WITH ORDINALITY u(qn, pn, txid, trace, payload, req, ord)
  ),
  items AS (
    SELECT u.ord, u.qn, u.pn, u.txid, u.trace, u.payload, u.full, p.id AS pid, q.dedup_window_seconds AS win,
           min(u.ord) FILTER (WHERE NOT u.full) OVER (PARTITION BY p.id, u.txid) AS first_ord,
           -- Encryption at rest (see the header), judged in this statement so
           -- the common push pays no extra one: 'u' unsealed, 'k' another key.
           CASE WHEN q.encryption_enabled AND NOT p_unsealed_ok
                     AND NOT queen.sealed_with(u.payload, q.encryption_key_id)
                THEN CASE WHEN queen.is_sealed(u.payload) THEN 'k' ELSE 'u' END END AS seal_fault
      FROM judged u
      JOIN queen.queues q ON q.name = u.qn
      JOIN queen.partitions p ON p.queue_id = q.id AND p.name = u.pn
  ),
  prior AS (
    SELECT DISTINCT ON (i.ord) i.ord, m.id
      FROM items i
      JOIN queen.messages m ON m.partition_id = i.pid AND m.transaction_id = i.txid
     WHERE i.ord = i.first_ord AND m.created_at > now() - make_interval(secs => i.win)
     ORDER BY i.ord, m.seq DESC
  ),
  -- Every item with its verdict and, when it is new, the id and offset it
  -- is inserted with. The answer reads these rows, not the INSERT's
  -- RETURNING: a generic plan estimates one row per CTE and joined the two
  -- by a nested loop, quadratic in the items of a batch.
  -- A partition's pushes get created_at no earlier than its last push, and
  -- ids from its id clock: both rise with offsets (migration 0008).
  lanes AS MATERIALIZED (
    SELECT p.id AS pid, p.next_seq, greatest(now(), p.last_push_at) AS at,
           queen.id_clock_start(greatest(now(), p.last_push_at), p.id_clock) AS clock
      FROM queen.partitions p
     WHERE p.id IN (SELECT DISTINCT i.pid FROM items i)
  ),
  decided AS MATERIALIZED (
    SELECT d.*,
           CASE WHEN d.is_fresh THEN coalesce(p_ids[d.ord::integer], queen.message_id(l.clock + d.rn, p_tails[d.ord::integer])) END AS new_id
      FROM (SELECT i.*, pr.id AS prior_id,
                   (i.ord = i.first_ord AND NOT i.full AND pr.id IS NULL) AS is_fresh,
                   count(*) FILTER (WHERE i.ord = i.first_ord AND NOT i.full AND pr.id IS NULL)
                     OVER (PARTITION BY i.pid ORDER BY i.ord) - 1 AS rn
              FROM items i LEFT JOIN prior pr ON pr.ord = i.first_ord) d
      JOIN lanes l ON l.pid = d.pid
  ),
  ins AS (
    INSERT INTO queen.messages (partition_id, seq, id, transaction_id, trace_id, payload, created_at,
                                producer_sub)
    SELECT f.pid, l.next_seq + f.rn, f.new_id, f.txid, f.trace, f.payload::json, l.at, p_subs[f.ord::integer]
      FROM decided f JOIN lanes l ON l.pid = f.pid
     WHERE f.is_fresh
    RETURNING 1
  ),
  -- Data-modifying CTEs always run to completion, read or not.
  bump AS (
    UPDATE queen.partitions p
       SET next_seq = p.next_seq + c.n, last_push_at = l.at, id_clock = l.clock + c.n - 1
      FROM (SELECT pid, count(*) AS n FROM decided WHERE is_fresh GROUP BY pid) c
      JOIN lanes l ON l.pid = c.pid
     WHERE p.id = c.pid
    RETURNING p.id
  ),
  -- A duplicate inside the call answers the id of its first occurrence.
  answered AS (
    SELECT f.*, first_value(coalesce(f.new_id, f.prior_id))
                  OVER (PARTITION BY f.pid, f.txid, f.full ORDER BY f.ord) AS message_id
      FROM decided f
  )
  SELECT json_agg(
           CASE WHEN a.full THEN
             json_build_object('index', a.ord - 1, 'message_id', NULL, 'transaction_id', a.txid,
               'queueName', a.qn, 'status', 'failed',
               'error', 'Queue ''' || a.qn || ''' would exceed max capacity')
           ELSE
             json_build_object('index', a.ord - 1, 'message_id', a.message_id,
               'transaction_id', a.txid, 'queueName', a.qn,
               'status', CASE WHEN a.is_fresh THEN 'queued' ELSE 'duplicate' END)
           END ORDER BY a.ord) FILTER (WHERE NOT p_lean),
         array_agg(DISTINCT a.qn) FILTER (WHERE a.is_fresh),
         array_agg(DISTINCT a.qn) FILTER (WHERE a.seal_fault = 'u'),
         min(a.qn) FILTER (WHERE a.seal_fault = 'k'),
         array_agg(CASE WHEN NOT a.full THEN a.message_id END ORDER BY a.ord) FILTER (WHERE p_lean),
         string_agg(CASE WHEN a.full THEN 'f' WHEN a.is_fresh THEN 'q' ELSE 'd' END, '' ORDER BY a.ord)
           FILTER (WHERE p_lean)
    INTO result, queued, v_unsealed, v_key_id, ids, verdicts
    FROM answered a;
  -- Raising rolls back what this statement wrote.
  IF v_key_id IS NOT NULL THEN
    PERFORM queen.encryption_key_mismatch(v_key_id);
  ELSIF v_unsealed IS NOT NULL THEN
    PERFORM queen.encryption_changed(v_unsealed);
  END IF;
END $$;
