-- Streams: /streams/v1/queries, /streams/v1/state/get, /streams/v1/cycle.
-- The engine decodes and checks every request (crates/queen-engine/src/streams.rs);
-- these functions keep what needs the database: the registry row, the
-- lease fence on the source cursor, the cursor move, the state rows, and
-- the pushes of the emits, all in one transaction.

-- A refusal the runner reads as `success: false` (HTTP 200); raised so the
-- whole cycle rolls back. Its facts (SQLSTATE QN203, {"refused": error});
-- the engine writes the answer (crates/queen-engine/src/streams.rs).
CREATE OR REPLACE FUNCTION queen.stream_refuse(p_error text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION USING ERRCODE = 'QN203', MESSAGE = jsonb_build_object('refused', p_error)::text;
END $$;

-- POST /streams/v1/queries: an upsert by name. A changed config hash is a
-- 409 unless p_reset; a reset deletes the query's state and gives the query
-- a new id, so a runner still on the old config is refused from then on.
-- The same hash with p_reset keeps everything (answers reset: false).
-- Answers the query's id, whether the name was new and whether its state
-- was reset; the engine writes the answer (streams.rs).
CREATE OR REPLACE FUNCTION queen.stream_register(
  p_name text, p_source text, p_sink text, p_hash text, p_reset boolean,
  OUT registered_id uuid, OUT fresh boolean, OUT state_reset boolean)
LANGUAGE plpgsql AS $$
DECLARE
  r queen.stream_queries;
  v_old uuid;
  v_fresh boolean;
  v_reset boolean := false;
BEGIN
  INSERT INTO queen.stream_queries (name, source_queue, sink_queue, config_hash)
  VALUES (p_name, p_source, p_sink, p_hash)
  ON CONFLICT (name) DO NOTHING
  RETURNING * INTO r;
  v_fresh := r.id IS NOT NULL;
  IF NOT v_fresh THEN
    SELECT * INTO r FROM queen.stream_queries WHERE name = p_name FOR NO KEY UPDATE;
    IF r.config_hash <> p_hash THEN
      IF NOT p_reset THEN
        RAISE EXCEPTION USING ERRCODE = 'QNC09', MESSAGE = json_build_object('success', false,
          'code', 'config_hash_mismatch', 'error', 'config_hash mismatch: query ''' || p_name
          || ''' is registered with ' || r.config_hash || ', this run has ' || p_hash)::text;
      END IF;
      -- The new id first: changing the key waits for cycles in flight (they
      -- hold KEY SHARE on the row); later cycles with the old id find none.
      v_old := r.id;
      UPDATE queen.stream_queries
         SET id = queen.uuid_v7(), config_hash = p_hash, source_queue = p_source, sink_queue = p_sink,
             updated_at = now(), reset_at = now()
       WHERE id = v_old
      RETURNING * INTO r;
      DELETE FROM queen.stream_state WHERE query_id = v_old;
      v_reset := true;
    ELSIF (r.source_queue, r.sink_queue) IS DISTINCT FROM (p_source, p_sink) THEN
      UPDATE queen.stream_queries SET source_queue = p_source, sink_queue = p_sink, updated_at = now()
       WHERE id = r.id;
    END IF;
  END IF;
  registered_id := r.id;
  fresh := v_fresh;
  state_reset := v_reset;
END $$;

-- POST /streams/v1/state/get: the rows of one (query, source partition),
-- in key (byte) order. Filters AND together: keys (empty = all), a literal
-- key prefix, and value.windowEnd (a JSON number) at or before a bound.
-- Each row's key, value text and time; the engine writes the answer.
CREATE OR REPLACE FUNCTION queen.stream_state_get(
  p_query uuid, p_partition uuid, p_keys text[], p_prefix text, p_ripe numeric)
RETURNS TABLE (key text, value text, updated_at text)
LANGUAGE sql STABLE AS $$
  -- A sealed row's value is its envelope (the engine opens it).
  SELECT s.key, coalesce(s.sealed, s.value::text), queen.iso(s.updated_at)
    FROM queen.stream_state s
   WHERE s.query_id = p_query AND s.partition_id = p_partition
     AND (cardinality(p_keys) = 0 OR s.key = ANY (p_keys))
     AND (p_prefix IS NULL OR starts_with(s.key, p_prefix))
     AND (p_ripe IS NULL OR (jsonb_typeof(s.value -> 'windowEnd') = 'number'
                             AND (s.value ->> 'windowEnd')::numeric <= p_ripe))
   ORDER BY s.key
$$;

-- POST /streams/v1/cycle: state ops, the emits' pushes and the ack of the
-- source messages commit together or not at all. Every refusal raises
-- (QN203 with its facts, or a push's own error), so nothing of a refused
-- cycle stays. Answers what the cycle did, as typed columns: the engine
-- writes the answer (engine/streams.rs): whether it was a replay, the
-- source queue, the state ops applied, whether the ack released the lease
-- or dead-lettered, the queues to announce and the emits' message ids.
--
-- Locks, in the global order (ARCHITECTURE.md): the query row FOR KEY
-- SHARE (fences a reset), sink partitions (push_rows), the source cursor
-- FOR UPDATE, then the state shard's advisory lock (key space 7244) and its
-- rows. An ack-less cycle (an idle flush) takes no cursor lock.
--
-- The ack: the lease on (partition, group) must be exactly a_lease and
-- live. release_lease commits the whole leased batch; a partial ack
-- (a gate) commits through the message named by a_txid when it lies in the
-- leased batch (the runner sorts by (createdAt, id), which is offset order,
-- migration 0008), else a_count messages from the batch start, and keeps
-- the lease. A partial ack whose message is already below the cursor is a
-- replay: it answers success and applies nothing (checked before any write).
-- Upserts and deletes come collapsed to the last op per key.
-- Encryption at rest: the state of an encrypted source is sealed by the
-- engine (u_sealed, each upsert's envelope; of u_values, only its windowEnd
-- is then stored, migration 0019); an unsealed upsert raises QN409 naming the
-- source, read under the source queue's row lock FOR SHARE so a configure
-- turning encryption on is ordered with this cycle.
-- p_subs: each emit's producer (the caller's JWT sub), set by the engine.
CREATE OR REPLACE FUNCTION queen.stream_cycle(
  p_query uuid, p_partition uuid, p_group text,
  u_keys text[], u_values text[], u_sealed text[], d_keys text[],
  p_queues text[], p_parts text[], p_txids text[], p_traces text[], p_payloads text[],
  a_present boolean, a_txid text, a_lease text, a_status text, a_count integer, p_release boolean,
  p_subs text[],
  OUT replayed boolean, OUT queue_name text, OUT state_ops integer, OUT released boolean, OUT dlq boolean,
  OUT queued text[], OUT push_ids uuid[])
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $$
DECLARE
  v_src text;
  v_src_id bigint;
  v_key text;
  v_verdicts text;
  v_bad integer;
  cur record;
  early record;
  r record;
  v_seq bigint;
  v_next bigint;
  v_gone integer := 0;
  qo record;
  v_dead bigint;
  v_exhausted boolean := false;
  v_retry_delay integer := 0;
BEGIN
  replayed := false;
  released := false;
  dlq := false;
  state_ops := 0;
  PERFORM 1 FROM queen.stream_queries WHERE id = p_query FOR KEY SHARE;
  IF NOT FOUND THEN
    PERFORM queen.stream_refuse('query not found');
  END IF;
  SELECT q.name, q.id INTO v_src, v_src_id
    FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id
   WHERE p.id = p_partition;
  IF v_src IS NULL THEN
    PERFORM queen.stream_refuse('partition not found');
  END IF;

  IF a_present THEN
    -- Before any write: a lease that is not ours now never becomes ours.
    SELECT c.next_seq, c.batch_end INTO early
      FROM queen.cursors c
     WHERE c.partition_id = p_partition AND c.consumer_group = p_group
       AND c.lease_id::text = lower(a_lease) AND c.lease_expires_at > now();
    IF NOT FOUND THEN
      PERFORM queen.stream_refuse('invalid or expired lease');
    END IF;
    IF NOT p_release AND a_status = 'completed' AND a_txid IS NOT NULL THEN
      SELECT m.seq INTO v_seq FROM queen.messages m
       WHERE m.partition_id = p_partition AND m.transaction_id = a_txid AND m.seq < early.batch_end
       ORDER BY m.seq DESC LIMIT 1;
      IF v_seq < early.next_seq THEN
        replayed := true;
        queue_name := v_src;
        RETURN;
      END IF;
    END IF;
  END IF;

  IF coalesce(array_length(p_queues, 1), 0) > 0 THEN
    SELECT x.ids, x.verdicts, x.queued INTO push_ids, v_verdicts, queued
      FROM queen.push_rows(p_queues, p_parts, p_txids, p_traces, p_payloads, NULL, p_subs => p_subs) x;
    v_bad := queen.first_unqueued(v_verdicts);
    IF v_bad IS NOT NULL THEN
      PERFORM queen.stream_refuse(CASE WHEN substr(v_verdicts, v_bad, 1) = 'f'
        THEN 'Queue ''' || p_queues[v_bad] || ''' would exceed max capacity'
        ELSE 'push item ' || (v_bad - 1) || ' was not queued' END || '; the cycle rolled back');
    END IF;
  END IF;

  IF a_present THEN
    SELECT c.next_seq, c.lease_id, c.lease_expires_at, c.batch_end, c.retry_count INTO cur
      FROM queen.cursors c
     WHERE c.partition_id = p_partition AND c.consumer_group = p_group
       FOR UPDATE;
    IF cur.lease_id IS NULL OR cur.lease_expires_at <= now() OR cur.lease_id::text <> lower(a_lease) THEN
      PERFORM queen.stream_refuse('invalid or expired lease');
    END IF;
    IF a_status <> 'completed' THEN
      -- A failed cycle is a nack of its batch, as ack_rows judges one: a
      -- retry counted, and past retryLimit the batch's first message goes
      -- to the dead letters (when the queue keeps them) and is skipped.
      SELECT q.id, q.retry_limit, q.retry_delay, q.dead_letter_queue, q.dlq_after_max_retries
        INTO qo
        FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id
       WHERE p.id = p_partition;
      v_retry_delay := qo.retry_delay;
      v_next := cur.next_seq;
      released := true;
      IF cur.retry_count >= qo.retry_limit THEN
        IF qo.dead_letter_queue AND qo.dlq_after_max_retries THEN
          INSERT INTO queen.dead_letters (queue_id, partition_id, consumer_group, seq, message_id,
                 transaction_id, trace_id, payload, error_message, retry_count, created_at, producer_sub)
          SELECT qo.id, m.partition_id, p_group, m.seq, m.id, m.transaction_id, m.trace_id, m.payload,
                 'Retries exhausted', cur.retry_count, m.created_at, m.producer_sub
            FROM queen.messages m
           WHERE m.partition_id = p_partition AND m.seq >= cur.next_seq AND m.seq < cur.batch_end
           ORDER BY m.seq LIMIT 1
          RETURNING seq INTO v_dead;
          dlq := v_dead IS NOT NULL;
        END IF;
        -- Past the first message still in the batch (a retention hole is skipped with it).
        v_next := coalesce(v_dead, (SELECT min(m.seq) FROM queen.messages m
                                     WHERE m.partition_id = p_partition AND m.seq >= cur.next_seq
                                       AND m.seq < cur.batch_end), cur.next_seq) + 1;
        v_exhausted := true;
      END IF;
    ELSIF p_release THEN
      v_next := cur.batch_end;
    ELSE
      v_seq := NULL;
      IF a_txid IS NOT NULL THEN
        SELECT m.seq INTO v_seq FROM queen.messages m
         WHERE m.partition_id = p_partition AND m.transaction_id = a_txid AND m.seq < cur.batch_end
         ORDER BY m.seq DESC LIMIT 1;
        -- A copy of this cycle committed while we waited for the cursor
        -- (a resend racing the original): answer its success, apply nothing.
        IF v_seq < cur.next_seq THEN
          RAISE EXCEPTION USING ERRCODE = 'QN203',
            MESSAGE = jsonb_build_object('replayed', jsonb_build_object('queueName', v_src))::text;
        END IF;
      END IF;
      -- No message named: count offsets, not rows, so rows a retention
      -- sweep deleted from the batch can only make this ack short.
      IF v_seq IS NULL AND a_count > 0 THEN
        v_seq := least(cur.next_seq + a_count - 1, cur.batch_end - 1);
      END IF;
      v_next := coalesce(v_seq + 1, cur.next_seq);
    END IF;
    released := released OR v_next >= cur.batch_end;
    UPDATE queen.cursors SET next_seq = v_next,
           lease_id = CASE WHEN released THEN NULL ELSE lease_id END,
           lease_expires_at = CASE WHEN released THEN NULL ELSE lease_expires_at END,
           batch_end = CASE WHEN released THEN NULL ELSE batch_end END,
           retry_count = CASE WHEN v_exhausted THEN 0
                              WHEN a_status <> 'completed' THEN retry_count + 1
                              WHEN released THEN 0 ELSE retry_count END,
           retry_at = CASE WHEN a_status <> 'completed' AND NOT v_exhausted AND v_retry_delay > 0
                           THEN now() + make_interval(secs => v_retry_delay / 1000.0) ELSE retry_at END
     WHERE partition_id = p_partition AND consumer_group = p_group;
  END IF;

  IF coalesce(array_length(u_keys, 1), 0) + coalesce(array_length(d_keys, 1), 0) > 0 THEN
    PERFORM pg_advisory_xact_lock(7244, hashtext(p_query::text || E'\x1f' || p_partition::text));
    IF coalesce(array_length(d_keys, 1), 0) > 0 THEN
      DELETE FROM queen.stream_state s
       WHERE s.query_id = p_query AND s.partition_id = p_partition AND s.key = ANY (d_keys);
      GET DIAGNOSTICS v_gone = ROW_COUNT;
      -- An idle flush deletes only rows it has just read: a missing one
      -- means another flush (a replay, or a zombie runner) got there first.
      IF NOT a_present AND v_gone < array_length(d_keys, 1) THEN
        PERFORM queen.stream_refuse('stale flush: a state row is already gone; nothing applied');
      END IF;
    END IF;
    IF coalesce(array_length(u_keys, 1), 0) > 0 THEN
      SELECT CASE WHEN q.encryption_enabled THEN q.encryption_key_id END INTO v_key
        FROM queen.queues q WHERE q.id = v_src_id FOR SHARE;
      IF v_key IS NOT NULL
         AND EXISTS (SELECT 1 FROM unnest(u_keys, u_sealed) u(k, s) WHERE NOT queen.sealed_with(u.s, v_key)) THEN
        IF EXISTS (SELECT 1 FROM unnest(u_sealed) u(s) WHERE queen.is_sealed(u.s)) THEN
          PERFORM queen.encryption_key_mismatch(v_src);
        END IF;
        PERFORM queen.encryption_changed(ARRAY[v_src]);
      END IF;
    END IF;
    INSERT INTO queen.stream_state (query_id, partition_id, key, value, sealed)
    SELECT p_query, p_partition, u.k,
           CASE WHEN u.s IS NULL THEN u.v::jsonb ELSE queen.stream_state_stub(u.v::jsonb) END, u.s
      FROM unnest(u_keys, u_values, u_sealed) u(k, v, s)
    ON CONFLICT (query_id, partition_id, key) DO UPDATE
      SET value = EXCLUDED.value, sealed = EXCLUDED.sealed, updated_at = now();
  END IF;

  IF released THEN
    queued := array_append(coalesce(queued, '{}'), v_src);
  END IF;
  queue_name := v_src;
  state_ops := coalesce(array_length(u_keys, 1), 0) + coalesce(array_length(d_keys, 1), 0);
END $$;
