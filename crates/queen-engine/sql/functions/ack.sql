-- Acks as offset commits. POST /api/v1/ack, /api/v1/ack/batch, and the ack
-- half of a transaction (strict mode: p_tx_id is set, and any refused item
-- raises its facts, QN202, so the whole transaction rolls back).
--
-- Locks: cursor rows FOR UPDATE, one (partition, group) at a time in
-- (partition id, group) order, so concurrent batch acks never deadlock.

-- Each item's verdict against its cursor as the caller's snapshot sees it
-- (the caller holds the cursor locks): unresolvable (no cursor, or the
-- transaction id is not in the partition), noop (a completion below the
-- cursor: done before), committed (a nack below the cursor), lease (a lease
-- was sent and is not the cursor's live one), ok. The verdicts are checked
-- in this order: clients re-ack with the lease the message was delivered
-- under, which is gone once the cursor moved past it. seqs: each item's
-- offset (NULL when unresolvable).
-- A set-returning SQL function of one SELECT, so that it is inlined into
-- the caller's statement and planned once with it (a SQL function that is
-- not inlined is planned again at every call).
CREATE OR REPLACE FUNCTION queen.ack_verdicts(
  p_txids text[], p_pids uuid[], p_statuses text[], p_leases text[], p_groups text[], p_lent_lease text)
RETURNS TABLE (verdicts text[], seqs bigint[])
LANGUAGE sql STABLE AS $$
  SELECT array_agg(v.verdict ORDER BY v.ord), array_agg(v.seq ORDER BY v.ord)
    FROM (SELECT u.ord, m.seq,
                 CASE WHEN c.queue_id IS NULL OR m.seq IS NULL THEN 'unresolvable'
                      WHEN m.seq < c.next_seq THEN CASE WHEN u.status = 'completed' THEN 'noop' ELSE 'committed' END
                      WHEN coalesce(nullif(u.lease, ''), p_lent_lease) IS NOT NULL
                           AND (c.lease_expires_at IS NULL OR c.lease_expires_at <= now()
                                OR c.lease_id::text <> lower(coalesce(nullif(u.lease, ''), p_lent_lease)))
                        THEN 'lease'
                      ELSE 'ok' END AS verdict
            FROM unnest(p_txids, p_pids, p_statuses, p_leases, p_groups)
                 WITH ORDINALITY u(txid, pid, status, lease, grp, ord)
            -- Lateral lookups: an index probe per item whatever the tables'
            -- sizes were when the generic plan was made.
            LEFT JOIN LATERAL (SELECT c.* FROM queen.cursors c
                                WHERE c.partition_id = u.pid AND c.consumer_group = u.grp) c ON true
            LEFT JOIN LATERAL (SELECT m.seq FROM queen.messages m
                                WHERE m.partition_id = u.pid AND m.transaction_id = u.txid
                                ORDER BY m.seq DESC LIMIT 1) m ON true) v
$$;

-- Why a transaction's acks are refused (strict mode: anything but ok
-- refuses, a noop included), NULL when every verdict is ok: the first
-- cursor, in lock order, with a refused item, and how many it has. The
-- engine writes the refusal (queen_wire::TxRefusal); ack_rows raises these
-- facts as {"ackRefused": ...} (SQLSTATE QN202), transaction_batch answers
-- them.
-- PL/pgSQL: its query is planned once per session (a SQL function with a
-- FROM cannot be inlined as an expression, and would be planned per call).
CREATE OR REPLACE FUNCTION queen.ack_refused(p_pids uuid[], p_groups text[], p_verdicts text[])
RETURNS jsonb
LANGUAGE plpgsql STABLE AS $$
BEGIN
  RETURN (SELECT jsonb_build_object('partitionId', u.pid, 'count', count(*))
            FROM unnest(p_pids, p_groups, p_verdicts) u(pid, grp, verdict)
           WHERE u.verdict <> 'ok'
           GROUP BY u.pid, u.grp
           ORDER BY u.pid, u.grp
           LIMIT 1);
END $$;

-- Applies completions whose verdicts are taken (queen.ack_verdicts, the
-- cursors locked): each cursor moves past its highest accepted item and
-- releases its lease when that reaches the leased batch's end, in one
-- statement whatever the count of items. Answers, per item in order,
-- whether its cursor's lease ended. A constant number of statements per
-- call, so a batch of acks costs one call (queen.ack_requests).
CREATE OR REPLACE FUNCTION queen.ack_completions(
  p_pids uuid[], p_groups text[], p_seqs bigint[], p_verdicts text[])
RETURNS boolean[]
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $$
DECLARE
  v_released boolean[];
BEGIN
  WITH done AS (
    SELECT d.pid, d.grp, d.next, c.lease_id IS NOT NULL AND d.next >= c.batch_end AS released
      FROM (SELECT u.pid, u.grp, max(u.seq) + 1 AS next
              FROM unnest(p_pids, p_groups, p_seqs, p_verdicts) u(pid, grp, seq, verdict)
             WHERE u.verdict = 'ok'
             GROUP BY u.pid, u.grp) d
      CROSS JOIN LATERAL (SELECT c.lease_id, c.batch_end FROM queen.cursors c
                           WHERE c.partition_id = d.pid AND c.consumer_group = d.grp) c
  ), moved AS (
    UPDATE queen.cursors c SET next_seq = d.next,
           retry_count = CASE WHEN d.released THEN 0 ELSE c.retry_count END,
           lease_id = CASE WHEN d.released THEN NULL ELSE c.lease_id END,
           lease_expires_at = CASE WHEN d.released THEN NULL ELSE c.lease_expires_at END,
           batch_end = CASE WHEN d.released THEN NULL ELSE c.batch_end END
      FROM done d
     WHERE c.partition_id = d.pid AND c.consumer_group = d.grp
  )
  SELECT array_agg(coalesce(d.released, false) ORDER BY i.ord)
    INTO v_released
    FROM unnest(p_pids, p_groups) WITH ORDINALITY i(pid, grp, ord)
    LEFT JOIN done d ON d.pid = i.pid AND d.grp = i.grp;
  RETURN v_released;
END $$;

-- The ack itself, on checked items (the engine decodes them, crates/queen-engine/src/ack.rs):
-- p_groups are resolved (item, call, or queue mode). Answers, per item in
-- order, its verdict (queen.ack_verdicts'), whether its cursor's lease
-- ended and whether it was dead-lettered; the engine writes each item's
-- answer from them (queen_wire::AckResult).
-- p_tx_id set: strict mode (the ack half of a transaction), where any
-- refused item raises QN202 with queen.ack_refused's facts before anything
-- is written. Three paths, each its own function: one completion
-- (queen.ack_completion), completions only (queen.ack_completions,
-- set-based), and nacks among the items (queen.ack_nacks, cursor by
-- cursor). tests/ack.rs covers each verdict on every path.
CREATE OR REPLACE FUNCTION queen.ack_rows(
  p_txids text[], p_pids uuid[], p_statuses text[], p_errors text[], p_leases text[], p_groups text[],
  p_tx_id text DEFAULT NULL, p_lent_lease text DEFAULT NULL,
  OUT verdicts text[], OUT released boolean[], OUT dlq boolean[])
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $$
DECLARE
  v_n integer;
  v_seqs bigint[];
  v_refused jsonb;
  v_one record;
BEGIN
  v_n := coalesce(array_length(p_txids, 1), 0);
  IF v_n = 0 THEN
    verdicts := '{}';
    released := '{}';
    dlq := '{}';
    RETURN;
  END IF;
  dlq := array_fill(false, ARRAY[v_n]);
  IF v_n = 1 AND p_statuses[1] = 'completed' THEN
    v_one := queen.ack_completion(p_txids[1], p_pids[1], p_leases[1], p_groups[1], p_tx_id, p_lent_lease);
    verdicts := ARRAY[v_one.verdict];
    released := ARRAY[v_one.released];
    RETURN;
  END IF;
  PERFORM queen.lock_cursors(p_pids, p_groups);
  SELECT v.verdicts, v.seqs INTO verdicts, v_seqs
    FROM queen.ack_verdicts(p_txids, p_pids, p_statuses, p_leases, p_groups, p_lent_lease) v;
  IF p_tx_id IS NOT NULL THEN
    v_refused := queen.ack_refused(p_pids, p_groups, verdicts);
    IF v_refused IS NOT NULL THEN
      RAISE EXCEPTION USING ERRCODE = 'QN202', MESSAGE = jsonb_build_object('ackRefused', v_refused)::text;
    END IF;
  END IF;

  -- Only completions (a consumer acking what it popped): set-based.
  IF p_statuses <@ ARRAY['completed'] THEN
    released := queen.ack_completions(p_pids, p_groups, v_seqs, verdicts);
    RETURN;
  END IF;

  SELECT n.released, n.dlq INTO released, dlq
    FROM queen.ack_nacks(p_pids, p_statuses, p_errors, p_groups, verdicts, v_seqs) n;
END $$;

-- queen.ack_rows' path for one completed item, the common ack (a lone ack,
-- a once + ack bundle): the verdicts of queen.ack_verdicts with three
-- statements instead of a join (each statement a function runs pays its
-- executor start-up).
-- Runs under ack_rows' generic plans (its SET reaches what it calls).
CREATE OR REPLACE FUNCTION queen.ack_completion(
  p_txid text, p_pid uuid, p_lease text, p_group text, p_tx_id text, p_lent_lease text,
  OUT verdict text, OUT released boolean)
LANGUAGE plpgsql AS $$
DECLARE
  cur record;
  v_seq bigint;
  v_lease text;
  v_next bigint;
BEGIN
  SELECT c.next_seq, c.lease_id, c.lease_expires_at, c.batch_end
    INTO cur
    FROM queen.cursors c
   WHERE c.partition_id = p_pid AND c.consumer_group = p_group
     FOR UPDATE OF c;
  SELECT m.seq INTO v_seq FROM queen.messages m
   WHERE m.partition_id = p_pid AND m.transaction_id = p_txid
   ORDER BY m.seq DESC LIMIT 1;
  v_lease := coalesce(nullif(p_lease, ''), p_lent_lease);
  verdict := CASE
    WHEN cur.next_seq IS NULL OR v_seq IS NULL THEN 'unresolvable'
    WHEN v_seq < cur.next_seq THEN 'noop'
    WHEN v_lease IS NOT NULL AND (cur.lease_expires_at IS NULL OR cur.lease_expires_at <= now()
                                  OR cur.lease_id::text <> lower(v_lease)) THEN 'lease'
    ELSE 'ok' END;
  IF p_tx_id IS NOT NULL AND verdict <> 'ok' THEN
    RAISE EXCEPTION USING ERRCODE = 'QN202', MESSAGE = jsonb_build_object('ackRefused',
      queen.ack_refused(ARRAY[p_pid], ARRAY[p_group], ARRAY[verdict]))::text;
  END IF;
  released := false;
  IF verdict = 'ok' THEN
    v_next := v_seq + 1;
    released := cur.lease_id IS NOT NULL AND v_next >= cur.batch_end;
    UPDATE queen.cursors SET next_seq = v_next,
           retry_count = CASE WHEN released THEN 0 ELSE retry_count END,
           lease_id = CASE WHEN released THEN NULL ELSE lease_id END,
           lease_expires_at = CASE WHEN released THEN NULL ELSE lease_expires_at END,
           batch_end = CASE WHEN released THEN NULL ELSE batch_end END
     WHERE partition_id = p_pid AND consumer_group = p_group;
  END IF;
END $$;

-- queen.ack_rows' path for items among which are nacks (failed, retry,
-- dlq): cursor by cursor, in lock order, on the verdicts and offsets
-- queen.ack_verdicts took (the cursors are locked). The lowest accepted
-- nack of a cursor clamps it just before that message, else it moves past
-- the highest completion. Runs under ack_rows' generic plans.
CREATE OR REPLACE FUNCTION queen.ack_nacks(
  p_pids uuid[], p_statuses text[], p_errors text[], p_groups text[], p_verdicts text[], p_seqs bigint[],
  OUT released boolean[], OUT dlq boolean[])
LANGUAGE plpgsql AS $$
DECLARE
  v_n integer := array_length(p_pids, 1);
  g record;
  cur record;
  v_ords integer[];
  v_min integer;
  v_max_done bigint;
  v_next bigint;
  v_released boolean;
  v_dlq boolean;
  i integer;
BEGIN
  released := array_fill(false, ARRAY[v_n]);
  dlq := array_fill(false, ARRAY[v_n]);
  FOR g IN
    SELECT u.pid, u.grp, array_agg(u.ord::integer ORDER BY u.ord) AS ords
      FROM unnest(p_pids, p_groups) WITH ORDINALITY u(pid, grp, ord)
     GROUP BY u.pid, u.grp
     ORDER BY u.pid, u.grp
  LOOP
    SELECT c.next_seq, c.lease_id, c.batch_end, c.retry_count, c.queue_id,
           q.retry_limit, q.retry_delay, q.dead_letter_queue, q.dlq_after_max_retries
      INTO cur
      FROM queen.cursors c JOIN queen.queues q ON q.id = c.queue_id
     WHERE c.partition_id = g.pid AND c.consumer_group = g.grp;
    -- The accepted items of this cursor; the lowest nack clamps it just
    -- before that message, else it moves past the highest completion.
    v_ords := '{}';
    v_min := NULL;
    v_max_done := NULL;
    FOREACH i IN ARRAY g.ords LOOP
      CONTINUE WHEN p_verdicts[i] <> 'ok';
      v_ords := v_ords || i;
      IF p_statuses[i] <> 'completed' AND (v_min IS NULL OR p_seqs[i] < p_seqs[v_min]) THEN
        v_min := i;
      END IF;
      IF p_statuses[i] = 'completed' AND (v_max_done IS NULL OR p_seqs[i] > v_max_done) THEN
        v_max_done := p_seqs[i];
      END IF;
    END LOOP;
    v_dlq := false;
    v_released := false;
    IF v_min IS NOT NULL THEN
      v_next := p_seqs[v_min];
      IF p_statuses[v_min] = 'dlq' OR (p_statuses[v_min] = 'failed' AND cur.retry_count >= cur.retry_limit) THEN
        IF cur.dead_letter_queue AND (p_statuses[v_min] = 'dlq' OR cur.dlq_after_max_retries) THEN
          INSERT INTO queen.dead_letters (queue_id, partition_id, consumer_group, seq, message_id,
                 transaction_id, trace_id, payload, error_message, retry_count, created_at, producer_sub)
          SELECT cur.queue_id, m.partition_id, g.grp, m.seq, m.id, m.transaction_id, m.trace_id, m.payload,
                 coalesce(p_errors[v_min], CASE WHEN p_statuses[v_min] = 'dlq' THEN 'Moved to DLQ' ELSE 'Retries exhausted' END),
                 cur.retry_count, m.created_at, m.producer_sub
            FROM queen.messages m WHERE m.partition_id = g.pid AND m.seq = v_next;
          v_dlq := true;
        END IF;
        UPDATE queen.cursors SET next_seq = v_next + 1, retry_count = 0,
               lease_id = NULL, lease_expires_at = NULL, batch_end = NULL
         WHERE partition_id = g.pid AND consumer_group = g.grp;
      ELSE
        -- A failed message waits out retryDelay before a pop claims its lane.
        UPDATE queen.cursors SET next_seq = v_next,
               retry_count = retry_count + CASE WHEN p_statuses[v_min] = 'failed' THEN 1 ELSE 0 END,
               lease_id = NULL, lease_expires_at = NULL, batch_end = NULL,
               retry_at = CASE WHEN p_statuses[v_min] = 'failed' AND cur.retry_delay > 0
                               THEN now() + make_interval(secs => cur.retry_delay / 1000.0) END
         WHERE partition_id = g.pid AND consumer_group = g.grp;
      END IF;
      v_released := true;
    ELSIF v_max_done IS NOT NULL THEN
      v_next := v_max_done + 1;
      v_released := cur.lease_id IS NOT NULL AND v_next >= cur.batch_end;
      UPDATE queen.cursors SET next_seq = v_next,
             retry_count = CASE WHEN v_released THEN 0 ELSE retry_count END,
             lease_id = CASE WHEN v_released THEN NULL ELSE lease_id END,
             lease_expires_at = CASE WHEN v_released THEN NULL ELSE lease_expires_at END,
             batch_end = CASE WHEN v_released THEN NULL ELSE batch_end END
       WHERE partition_id = g.pid AND consumer_group = g.grp;
    END IF;
    FOREACH i IN ARRAY g.ords LOOP
      released[i] := v_released;
      dlq[i] := i = v_min AND v_dlq;
    END LOOP;
  END LOOP;
END $$;

-- Locks the cursors of (partition, group) pairs FOR UPDATE in the global
-- order, (partition id, group), before a batch touches any of them: its
-- requests' cursors interleave, and locking them as each request comes
-- would let two batches deadlock. Used by ack_requests and
-- transaction_requests.
CREATE OR REPLACE FUNCTION queen.lock_cursors(p_pids uuid[], p_groups text[]) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
  PERFORM 1
     FROM queen.cursors c
    WHERE (c.partition_id, c.consumer_group) IN
          (SELECT u.pid, u.grp FROM unnest(p_pids, p_groups) u(pid, grp))
    ORDER BY c.partition_id, c.consumer_group
      FOR UPDATE;
END $$;

-- The ack requests of a batch (batch.rs) in one statement: each request
-- runs ack_rows on its own items, in arrival order, so its answer is the
-- one a call of its own would have had (the lowest nack of a request
-- clamps its cursor; a later request sees the cursor the earlier one left).
-- Every cursor of the batch is locked first, in the (partition, group)
-- order ack_rows locks them in, so two batches never deadlock although a
-- request's cursors and the next request's interleave. p_requests numbers
-- each item's request from 0 (a request's items are contiguous). Answers
-- ack_rows' columns for every item of the batch, in order.
CREATE OR REPLACE FUNCTION queen.ack_requests(
  p_txids text[], p_pids uuid[], p_statuses text[], p_errors text[], p_leases text[], p_groups text[],
  p_requests integer[], OUT verdicts text[], OUT released boolean[], OUT dlq boolean[])
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $$
DECLARE
  r record;
  a record;
  v_seqs bigint[];
BEGIN
  PERFORM queen.lock_cursors(p_pids, p_groups);
  -- Completions only, and no cursor acked by two requests: no request can
  -- see another's writes, so every verdict is taken against the cursors
  -- as found and the whole batch is applied at once.
  IF p_statuses <@ ARRAY['completed'] AND NOT EXISTS (
       SELECT 1 FROM unnest(p_pids, p_groups, p_requests) u(pid, grp, req)
        GROUP BY u.pid, u.grp HAVING count(DISTINCT u.req) > 1) THEN
    SELECT v.verdicts, v.seqs INTO verdicts, v_seqs
      FROM queen.ack_verdicts(p_txids, p_pids, p_statuses, p_leases, p_groups, NULL) v;
    released := queen.ack_completions(p_pids, p_groups, v_seqs, verdicts);
    dlq := array_fill(false, ARRAY[cardinality(p_txids)]);
    RETURN;
  END IF;
  verdicts := '{}';
  released := '{}';
  dlq := '{}';
  FOR r IN
    SELECT u.req,
           array_agg(u.txid ORDER BY u.n) AS txids, array_agg(u.pid ORDER BY u.n) AS pids,
           array_agg(u.status ORDER BY u.n) AS statuses, array_agg(u.err ORDER BY u.n) AS errs,
           array_agg(u.lease ORDER BY u.n) AS leases, array_agg(u.grp ORDER BY u.n) AS grps
      FROM unnest(p_txids, p_pids, p_statuses, p_errors, p_leases, p_groups, p_requests)
           WITH ORDINALITY u(txid, pid, status, err, lease, grp, req, n)
     GROUP BY u.req
     ORDER BY u.req
  LOOP
    SELECT x.verdicts, x.released, x.dlq INTO a
      FROM queen.ack_rows(r.txids, r.pids, r.statuses, r.errs, r.leases, r.grps) x;
    verdicts := verdicts || a.verdicts;
    released := released || a.released;
    dlq := dlq || a.dlq;
  END LOOP;
END $$;
