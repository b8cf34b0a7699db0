-- Acks as offset commits. POST /api/v1/ack, /api/v1/ack/batch, and the ack
-- half of a transaction (strict mode: p_tx_id is set, and any refused item
-- raises QN200 so the whole transaction rolls back).
--
-- Locks: cursor rows FOR UPDATE, one (partition, group) at a time in
-- (partition id, group) order, so concurrent batch acks never deadlock.

-- The JSON entry point is gone: the engine checks acks (ack.rs) and passes arrays.
DROP FUNCTION IF EXISTS queen.ack(json, text, text, text);

-- The ack itself, on checked items (the engine decodes them, crates/queen-engine/src/ack.rs):
-- one element per item; p_groups are resolved (item, call, or queue mode).
CREATE OR REPLACE FUNCTION queen.ack_rows(
  p_txids text[], p_pids uuid[], p_statuses text[], p_errors text[], p_leases text[], p_groups text[],
  p_tx_id text DEFAULT NULL, p_lent_lease text DEFAULT NULL)
RETURNS json
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $$
DECLARE
  v_n integer;
  v_res jsonb[];
  g record;
  it record;
  cur record;
  v_live text;
  v_lease text;
  v_ords integer[];
  v_seqs bigint[];
  v_stats text[];
  v_errs text[];
  v_min integer;
  v_max_done bigint;
  v_next bigint;
  v_released boolean;
  v_dlq boolean;
  v_failed integer;
  v_seq bigint;
  v_one jsonb;
  i integer;
BEGIN
  v_n := coalesce(array_length(p_txids, 1), 0);
  IF v_n = 0 THEN
    RETURN '[]'::json;
  END IF;

  -- One completed item, the common ack (a lone ack, a once + ack bundle):
  -- the verdicts of the general path below, in the same order, with four
  -- statements instead of a dozen (each statement a function runs pays its
  -- executor start-up). tests/ack.rs covers each verdict on this path, and
  -- tests/batching_writes.rs the general one.
  IF v_n = 1 AND p_statuses[1] = 'completed' THEN
    SELECT c.next_seq, c.lease_id, c.lease_expires_at, c.batch_end, c.queue_id
      INTO cur
      FROM queen.cursors c
     WHERE c.partition_id = p_pids[1] AND c.consumer_group = p_groups[1]
       FOR UPDATE OF c;
    SELECT m.seq INTO v_seq FROM queen.messages m
     WHERE m.partition_id = p_pids[1] AND m.transaction_id = p_txids[1]
     ORDER BY m.seq DESC LIMIT 1;
    v_lease := coalesce(nullif(p_leases[1], ''), p_lent_lease);
    v_live := CASE WHEN cur.lease_expires_at > now() THEN cur.lease_id::text END;
    IF cur.queue_id IS NULL OR v_seq IS NULL THEN
      v_one := jsonb_build_object('index', 0, 'transactionId', p_txids[1], 'success', false,
        'error', 'unresolvable: transaction not in the ack window (hash purged or never pushed); if leased, the message redelivers',
        'leaseReleased', false, 'dlq', false, 'noop', false);
      v_failed := 1;
    ELSIF v_seq < cur.next_seq THEN
      v_one := jsonb_build_object('index', 0, 'transactionId', p_txids[1], 'success', true,
        'error', NULL, 'leaseReleased', false, 'dlq', false, 'noop', true);
      v_failed := CASE WHEN p_tx_id IS NOT NULL THEN 1 ELSE 0 END;
    ELSIF v_lease IS NOT NULL AND (v_live IS NULL OR v_live <> lower(v_lease)) THEN
      v_one := jsonb_build_object('index', 0, 'transactionId', p_txids[1], 'success', false,
        'error', 'invalid or expired lease', 'leaseReleased', false, 'dlq', false, 'noop', false);
      v_failed := 1;
    ELSE
      v_next := v_seq + 1;
      v_released := cur.lease_id IS NOT NULL AND v_next >= cur.batch_end;
      UPDATE queen.cursors SET next_seq = v_next,
             retry_count = CASE WHEN v_released THEN 0 ELSE retry_count END,
             lease_id = CASE WHEN v_released THEN NULL ELSE lease_id END,
             lease_expires_at = CASE WHEN v_released THEN NULL ELSE lease_expires_at END,
             batch_end = CASE WHEN v_released THEN NULL ELSE batch_end END
       WHERE partition_id = p_pids[1] AND consumer_group = p_groups[1];
      v_one := jsonb_build_object('index', 0, 'transactionId', p_txids[1], 'success', true, 'error', NULL,
        'leaseReleased', v_released, 'dlq', false, 'noop', false);
      v_failed := 0;
    END IF;
    IF v_failed > 0 AND p_tx_id IS NOT NULL THEN
      RAISE EXCEPTION USING ERRCODE = 'QN200', MESSAGE = json_build_object(
        'transactionId', p_tx_id, 'success', false, 'reason', 'rejected_ack', 'results', '[]'::json,
        'error', 'QTXN 1 acked message(s) on partition ' || p_pids[1]
          || ' are not leased by this worker or were already acked; the transaction rolled back')::text;
    END IF;
    RETURN json_build_array(v_one);
  END IF;
  v_res := array_fill(NULL::jsonb, ARRAY[v_n]);

  FOR g IN
    SELECT DISTINCT u.pid, u.grp FROM unnest(p_pids, p_groups) u(pid, grp) ORDER BY 1, 2
  LOOP
    SELECT c.next_seq, c.lease_id, c.lease_expires_at, c.batch_end, c.retry_count, c.queue_id,
           q.retry_limit, q.retry_delay, q.dead_letter_queue, q.dlq_after_max_retries
      INTO cur
      FROM queen.cursors c JOIN queen.queues q ON q.id = c.queue_id
     WHERE c.partition_id = g.pid AND c.consumer_group = g.grp
       FOR UPDATE OF c;
    v_live := CASE WHEN cur.lease_expires_at > now() THEN cur.lease_id::text END;
    v_ords := '{}'; v_seqs := '{}'; v_stats := '{}'; v_errs := '{}';
    v_failed := 0;

    FOR it IN
      SELECT u.ord::integer AS ord, u.txid, u.status, u.err,
             coalesce(nullif(u.lease, ''), p_lent_lease) AS lease,
             (SELECT m.seq FROM queen.messages m
               WHERE m.partition_id = g.pid AND m.transaction_id = u.txid
               ORDER BY m.seq DESC LIMIT 1) AS seq
        FROM unnest(p_txids, p_pids, p_statuses, p_errors, p_leases, p_groups)
             WITH ORDINALITY u(txid, pid, status, err, lease, grp, ord)
       WHERE u.pid = g.pid AND u.grp = g.grp
       ORDER BY u.ord
    LOOP
      IF cur.queue_id IS NULL OR it.seq IS NULL THEN
        v_res[it.ord] := jsonb_build_object('index', it.ord - 1, 'transactionId', it.txid, 'success', false,
          'error', 'unresolvable: transaction not in the ack window (hash purged or never pushed); if leased, the message redelivers',
          'leaseReleased', false, 'dlq', false, 'noop', false);
        v_failed := v_failed + 1;
      ELSIF it.seq < cur.next_seq THEN
        IF it.status = 'completed' THEN
          v_res[it.ord] := jsonb_build_object('index', it.ord - 1, 'transactionId', it.txid, 'success', true,
            'error', NULL, 'leaseReleased', false, 'dlq', false, 'noop', true);
          IF p_tx_id IS NOT NULL THEN
            v_failed := v_failed + 1;
          END IF;
        ELSE
          v_res[it.ord] := jsonb_build_object('index', it.ord - 1, 'transactionId', it.txid, 'success', false,
            'error', 'already committed: the cursor moved past this message before this ack',
            'leaseReleased', false, 'dlq', false, 'noop', false);
          v_failed := v_failed + 1;
        END IF;
      -- After the below-cursor verdicts: clients re-ack with the lease the
      -- message was delivered under, which is gone by then.
      ELSIF it.lease IS NOT NULL AND (v_live IS NULL OR v_live <> lower(it.lease)) THEN
        v_res[it.ord] := jsonb_build_object('index', it.ord - 1, 'transactionId', it.txid, 'success', false,
          'error', 'invalid or expired lease', 'leaseReleased', false, 'dlq', false, 'noop', false);
        v_failed := v_failed + 1;
      ELSE
        v_ords := v_ords || it.ord; v_seqs := v_seqs || it.seq;
        v_stats := v_stats || it.status; v_errs := v_errs || it.err;
      END IF;
    END LOOP;

    IF v_failed > 0 AND p_tx_id IS NOT NULL THEN
      RAISE EXCEPTION USING ERRCODE = 'QN200', MESSAGE = json_build_object(
        'transactionId', p_tx_id, 'success', false, 'reason', 'rejected_ack', 'results', '[]'::json,
        'error', 'QTXN ' || v_failed || ' acked message(s) on partition ' || g.pid
          || ' are not leased by this worker or were already acked; the transaction rolled back')::text;
    END IF;
    CONTINUE WHEN coalesce(array_length(v_ords, 1), 0) = 0;

    -- The lowest nack clamps the cursor just before it.
    v_min := NULL;
    v_max_done := NULL;
    FOR i IN 1 .. array_length(v_ords, 1) LOOP
      IF v_stats[i] <> 'completed' AND (v_min IS NULL OR v_seqs[i] < v_seqs[v_min]) THEN
        v_min := i;
      END IF;
      IF v_stats[i] = 'completed' AND (v_max_done IS NULL OR v_seqs[i] > v_max_done) THEN
        v_max_done := v_seqs[i];
      END IF;
    END LOOP;

    v_dlq := false;
    IF v_min IS NOT NULL THEN
      v_next := v_seqs[v_min];
      IF v_stats[v_min] = 'dlq' OR (v_stats[v_min] = 'failed' AND cur.retry_count >= cur.retry_limit) THEN
        IF cur.dead_letter_queue AND (v_stats[v_min] = 'dlq' OR cur.dlq_after_max_retries) THEN
          INSERT INTO queen.dead_letters (queue_id, partition_id, consumer_group, seq, message_id,
                 transaction_id, trace_id, payload, error_message, retry_count, created_at, producer_sub)
          SELECT cur.queue_id, m.partition_id, g.grp, m.seq, m.id, m.transaction_id, m.trace_id, m.payload,
                 coalesce(v_errs[v_min], CASE WHEN v_stats[v_min] = 'dlq' THEN 'Moved to DLQ' ELSE 'Retries exhausted' END),
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
               retry_count = retry_count + CASE WHEN v_stats[v_min] = 'failed' THEN 1 ELSE 0 END,
               lease_id = NULL, lease_expires_at = NULL, batch_end = NULL,
               retry_at = CASE WHEN v_stats[v_min] = 'failed' AND cur.retry_delay > 0
                               THEN now() + make_interval(secs => cur.retry_delay / 1000.0) END
         WHERE partition_id = g.pid AND consumer_group = g.grp;
      END IF;
      v_released := true;
    ELSE
      v_next := v_max_done + 1;
      v_released := cur.lease_id IS NOT NULL AND v_next >= cur.batch_end;
      UPDATE queen.cursors SET next_seq = v_next,
             retry_count = CASE WHEN v_released THEN 0 ELSE retry_count END,
             lease_id = CASE WHEN v_released THEN NULL ELSE lease_id END,
             lease_expires_at = CASE WHEN v_released THEN NULL ELSE lease_expires_at END,
             batch_end = CASE WHEN v_released THEN NULL ELSE batch_end END
       WHERE partition_id = g.pid AND consumer_group = g.grp;
    END IF;

    FOR i IN 1 .. array_length(v_ords, 1) LOOP
      v_res[v_ords[i]] := jsonb_build_object('index', v_ords[i] - 1,
        'transactionId', p_txids[v_ords[i]], 'success', true, 'error', NULL,
        'leaseReleased', v_released, 'dlq', (i = v_min AND v_dlq), 'noop', false);
    END LOOP;
  END LOOP;

  RETURN (SELECT json_agg(r ORDER BY n) FROM unnest(v_res) WITH ORDINALITY u(r, n));
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
-- each item's request from 0. Answers one JSON array per request.
CREATE OR REPLACE FUNCTION queen.ack_requests(
  p_txids text[], p_pids uuid[], p_statuses text[], p_errors text[], p_leases text[], p_groups text[],
  p_requests integer[])
RETURNS text[]
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $$
DECLARE
  v_res text[] := '{}';
  r record;
BEGIN
  PERFORM queen.lock_cursors(p_pids, p_groups);
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
    v_res := v_res || queen.ack_rows(r.txids, r.pids, r.statuses, r.errs, r.leases, r.grps)::text;
  END LOOP;
  RETURN v_res;
END $$;
