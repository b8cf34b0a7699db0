-- Timers. The call is decoded and checked in Rust (timers.rs): ops, keys,
-- the base64 payload (a JSON document), the horizon, one op per key. Here:
-- the upsert, cancel against a concurrent fire, and the fire itself.
--
-- Locks: an op locks its timer row (upsert, or FOR UPDATE SKIP LOCKED for
-- a cancel); a call applies its ops in (queue, key) order. The sweeper
-- claims due rows FOR UPDATE SKIP LOCKED, so brokers never fire one row
-- twice and a cancel never waits for a fire: it answers too_late.

-- A cancel: cancelled (with the timer's txn), too_late (a sweeper holds it)
-- or absent (with the caller's txn).
CREATE OR REPLACE FUNCTION queen.timer_cancel(p_queue text, p_key text, p_txn text,
                                              OUT outcome text, OUT outcome_txn text)
LANGUAGE plpgsql AS $$
BEGIN
  SELECT 'cancelled', t.txn INTO outcome, outcome_txn FROM queen.timers t
   WHERE t.queue_name = p_queue AND t.timer_key = p_key
     FOR UPDATE SKIP LOCKED;
  IF FOUND THEN
    DELETE FROM queen.timers t WHERE t.queue_name = p_queue AND t.timer_key = p_key;
    RETURN;
  END IF;
  outcome_txn := p_txn;
  -- Locked by a sweeper that is firing it (or by a writer of the same key).
  IF EXISTS (SELECT 1 FROM queen.timers t WHERE t.queue_name = p_queue AND t.timer_key = p_key) THEN
    outcome := 'too_late';
  ELSE
    outcome := 'absent';
  END IF;
END $$;

-- schedule and reschedule are one upsert: attempts start again, and a new
-- txn gets a new promised message id (the same txn keeps its id). p_sub:
-- the scheduling token's `sub`, which the fired message carries as its
-- producer_sub (a reschedule takes the rescheduler's). Answers scheduled or
-- rescheduled, the txn, the promised message id and the due time.
CREATE OR REPLACE FUNCTION queen.timer_schedule(
  p_queue text, p_key text, p_partition text, p_payload text, p_delay_ms bigint, p_txn text, p_sub text,
  OUT outcome text, OUT outcome_txn text, OUT promised_id uuid, OUT due_at text)
LANGUAGE plpgsql AS $$
DECLARE
  v_txn text;
  v_id uuid;
  v_at timestamptz;
  v_inserted boolean;
  v_key_id text;
BEGIN
  -- Encryption at rest: a timer of an encrypted queue stores its payload
  -- sealed by the engine with the queue's key (fired as is), as push_rows
  -- fences a push. The queue row FOR SHARE: a configure turning encryption
  -- on waits for this timer's commit (and then seals it, sealing.rs), or
  -- this waits for the configure's and sees the flag.
  SELECT CASE WHEN q.encryption_enabled THEN q.encryption_key_id END INTO v_key_id FROM queen.queues q
   WHERE q.name = p_queue FOR SHARE;
  IF v_key_id IS NOT NULL AND NOT queen.sealed_with(p_payload, v_key_id) THEN
    IF queen.is_sealed(p_payload) THEN
      PERFORM queen.encryption_key_mismatch(p_queue);
    END IF;
    PERFORM queen.encryption_changed(ARRAY[p_queue]);
  END IF;
  INSERT INTO queen.timers AS x (queue_name, timer_key, partition_name, payload, txn, message_id, deliver_at,
                                 producer_sub)
  VALUES (p_queue, p_key, p_partition, p_payload::json, p_txn, queen.uuid_v7(),
          statement_timestamp() + make_interval(secs => p_delay_ms / 1000.0), p_sub)
  ON CONFLICT (queue_name, timer_key) DO UPDATE
    SET partition_name = EXCLUDED.partition_name, payload = EXCLUDED.payload,
        producer_sub = EXCLUDED.producer_sub,
        message_id = CASE WHEN x.txn = EXCLUDED.txn THEN x.message_id ELSE EXCLUDED.message_id END,
        txn = EXCLUDED.txn, deliver_at = EXCLUDED.deliver_at, attempts = 0, last_error = NULL,
        updated_at = now()
  RETURNING x.txn, x.message_id, x.deliver_at, (x.xmax = 0) INTO v_txn, v_id, v_at, v_inserted;
  outcome := CASE WHEN v_inserted THEN 'scheduled' ELSE 'rescheduled' END;
  outcome_txn := v_txn;
  promised_id := v_id;
  due_at := queen.iso(v_at);
END $$;

-- One timers call (or a transaction's rider): each op's outcome, txn,
-- promised message id and due time (the last two for schedules), in op
-- order; the engine writes the elements (queen_wire::TimerResult).
-- p_sub: the caller's `sub` (NULL without JWT auth), set by the engine.
CREATE OR REPLACE FUNCTION queen.timer_apply(
  p_ops text[], p_queues text[], p_keys text[], p_partitions text[], p_payloads text[],
  p_delays bigint[], p_txns text[], p_sub text,
  OUT statuses text[], OUT txns text[], OUT message_ids uuid[], OUT deliver_ats text[])
LANGUAGE plpgsql AS $$
DECLARE
  i integer;
  v_n integer := coalesce(array_length(p_ops, 1), 0);
  r record;
BEGIN
  statuses := array_fill(NULL::text, ARRAY[v_n]);
  txns := array_fill(NULL::text, ARRAY[v_n]);
  message_ids := array_fill(NULL::uuid, ARRAY[v_n]);
  deliver_ats := array_fill(NULL::text, ARRAY[v_n]);
  FOR i IN SELECT n FROM generate_subscripts(p_ops, 1) n ORDER BY p_queues[n], p_keys[n] COLLATE "C", n LOOP
    IF p_ops[i] = 'cancel' THEN
      SELECT c.outcome, c.outcome_txn INTO r FROM queen.timer_cancel(p_queues[i], p_keys[i], p_txns[i]) c;
      statuses[i] := r.outcome;
      txns[i] := r.outcome_txn;
    ELSE
      SELECT s.outcome, s.outcome_txn, s.promised_id, s.due_at INTO r
        FROM queen.timer_schedule(p_queues[i], p_keys[i], p_partitions[i], p_payloads[i],
                                  p_delays[i], p_txns[i], p_sub) s;
      statuses[i] := r.outcome;
      txns[i] := r.outcome_txn;
      message_ids[i] := r.promised_id;
      deliver_ats[i] := r.due_at;
    END IF;
  END LOOP;
END $$;

-- A pending timer's fields as typed columns, and its payload as stored
-- (exact text, perhaps sealed); no row when it is not pending. The engine
-- writes the peek (queen_wire::TimerPeek).
CREATE OR REPLACE FUNCTION queen.timer_row(p_queue text, p_key text)
RETURNS TABLE (queue text, timer_key text, partition text, txn text, message_id uuid, deliver_at text,
               attempts integer, last_error text, created_at text, updated_at text, payload text)
LANGUAGE sql STABLE AS $$
  SELECT t.queue_name, t.timer_key, t.partition_name, t.txn, t.message_id, queen.iso(t.deliver_at),
         t.attempts, t.last_error, queen.iso(t.created_at), queen.iso(t.updated_at), t.payload::text
    FROM queen.timers t
   WHERE t.queue_name = p_queue AND t.timer_key = p_key
$$;

-- A keyset page of p_queue's pending timers after p_after in key byte
-- order: up to p_limit, and one row more when more follow. The fields of
-- queen.timer_row without the payload; the engine writes the page
-- (queen_wire::TimerPage).
CREATE OR REPLACE FUNCTION queen.timer_page(p_queue text, p_after text, p_limit integer)
RETURNS TABLE (queue text, timer_key text, partition text, txn text, message_id uuid, deliver_at text,
               attempts integer, last_error text, created_at text, updated_at text, payload text)
LANGUAGE sql STABLE AS $$
  SELECT t.queue_name, t.timer_key, t.partition_name, t.txn, t.message_id, queen.iso(t.deliver_at),
         t.attempts, t.last_error, queen.iso(t.created_at), queen.iso(t.updated_at), NULL::text
    FROM queen.timers t
   WHERE t.queue_name = p_queue AND (p_after IS NULL OR t.timer_key > p_after COLLATE "C")
   ORDER BY t.timer_key
   LIMIT p_limit + 1
$$;

-- Fires up to p_limit due timers: each becomes one message (with its
-- promised id and its txn as transactionId) in the transaction that
-- deletes its row. A timer whose queue refuses the push (maxSize) stays,
-- with a back-off. Answers the fire lag of each fired timer.
CREATE OR REPLACE FUNCTION queen.timers_fire(p_limit integer,
  OUT fired integer, OUT queued text[], OUT lag_ms double precision[])
LANGUAGE plpgsql AS $$
DECLARE
  v_queues text[];
  v_parts text[];
  v_txns text[];
  v_payloads text[];
  v_ids uuid[];
  v_keys text[];
  v_due timestamptz[];
  v_subs text[];
  v_verdicts text;
BEGIN
  SELECT array_agg(d.queue_name ORDER BY d.deliver_at, d.queue_name, d.timer_key),
         array_agg(d.partition_name ORDER BY d.deliver_at, d.queue_name, d.timer_key),
         array_agg(d.txn ORDER BY d.deliver_at, d.queue_name, d.timer_key),
         array_agg(d.payload::text ORDER BY d.deliver_at, d.queue_name, d.timer_key),
         array_agg(d.message_id ORDER BY d.deliver_at, d.queue_name, d.timer_key),
         array_agg(d.timer_key ORDER BY d.deliver_at, d.queue_name, d.timer_key),
         array_agg(d.deliver_at ORDER BY d.deliver_at, d.queue_name, d.timer_key),
         array_agg(d.producer_sub ORDER BY d.deliver_at, d.queue_name, d.timer_key)
    INTO v_queues, v_parts, v_txns, v_payloads, v_ids, v_keys, v_due, v_subs
    FROM (SELECT * FROM queen.timers t WHERE t.deliver_at <= statement_timestamp()
           ORDER BY t.deliver_at LIMIT p_limit FOR UPDATE SKIP LOCKED) d;
  fired := 0;
  IF v_queues IS NULL THEN
    RETURN;
  END IF;
  SELECT x.verdicts, x.queued INTO v_verdicts, queued
    FROM queen.push_rows(v_queues, v_parts, v_txns, array_fill(NULL::text, ARRAY[cardinality(v_queues)]),
                         v_payloads, NULL, v_ids, false, v_subs) x;
  -- q queued, d duplicate (fired already: gone too), f refused by maxSize.
  WITH outcome AS (
    SELECT v.n, CASE v.c WHEN 'q' THEN 'queued' WHEN 'd' THEN 'duplicate' ELSE 'failed' END AS status,
           CASE WHEN v.c = 'f' THEN 'Queue ''' || v_queues[v.n] || ''' would exceed max capacity' END AS error
      FROM unnest(string_to_array(v_verdicts, NULL)) WITH ORDINALITY v(c, n)
  ),
  gone AS (
    DELETE FROM queen.timers t
     USING outcome o
     WHERE o.status IN ('queued', 'duplicate')
       AND t.queue_name = v_queues[o.n] AND t.timer_key = v_keys[o.n]
    RETURNING o.n
  ),
  kept AS (
    UPDATE queen.timers t
       SET attempts = t.attempts + 1, last_error = o.error,
           deliver_at = statement_timestamp() + make_interval(secs => least(power(2, least(t.attempts, 6)), 60)),
           updated_at = now()
      FROM outcome o
     WHERE o.status NOT IN ('queued', 'duplicate')
       AND t.queue_name = v_queues[o.n] AND t.timer_key = v_keys[o.n]
    RETURNING o.n
  )
  SELECT count(*),
         array_agg(extract(epoch FROM (clock_timestamp() - v_due[g.n])) * 1000)
    INTO fired, lag_ms
    FROM gone g;
END $$;
