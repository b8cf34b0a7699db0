-- Dead letters: listing, the dashboard's page, replay and purge (dlq.rs, engine/dlq.rs).

-- The dead letters p_ids, in that order (ord from 1), as the engine writes
-- them (queen_wire::DeadLetter): the one place a dead letter's fields are
-- read. A set-returning SQL function of one SELECT, inlined into its
-- caller's statement. Lateral lookups: a primary-key probe per id whatever
-- the table's size was when a generic plan was made (a join became a hash
-- join over a sequential scan of an empty table).
CREATE OR REPLACE FUNCTION queen.dead_letter_rows(p_ids bigint[])
RETURNS TABLE (ord bigint, dlq_id bigint, message_id uuid, payload text, error_message text,
               transaction_id text, trace_id text, partition_id uuid, producer_sub text, queue text,
               partition text, consumer_group text, retry_count integer, created_at text, failed_at text)
LANGUAGE sql STABLE AS $$
  SELECT u.ord, d.id, d.message_id, d.payload::text, d.error_message, d.transaction_id, d.trace_id,
         d.partition_id, d.producer_sub, q.name, p.name, d.consumer_group, d.retry_count,
         queen.iso(d.created_at), queen.iso(d.failed_at)
    FROM unnest(p_ids) WITH ORDINALITY u(id, ord)
    CROSS JOIN LATERAL (SELECT d.* FROM queen.dead_letters d WHERE d.id = u.id LIMIT 1) d
    JOIN queen.queues q ON q.id = d.queue_id
    LEFT JOIN queen.partitions p ON p.id = d.partition_id
$$;

-- GET /api/v1/dlq: how many dead letters match, and the ids of one page of
-- them, newest failures first (queen.dead_letter_rows reads them).
CREATE OR REPLACE FUNCTION queen.dlq_list(
  p_queue text, p_group text, p_partition text, p_from text, p_to text, p_limit integer, p_offset integer,
  OUT total bigint, OUT ids bigint[])
LANGUAGE plpgsql STABLE AS $$
DECLARE
  v_from timestamptz;
  v_to timestamptz;
BEGIN
  IF p_limit IS NULL OR p_limit < 1 OR p_limit > 10000 THEN
    PERFORM queen.bad_request('limit', 'must be an integer from 1 to 10000');
  END IF;
  IF p_offset IS NULL OR p_offset < 0 THEN
    PERFORM queen.bad_request('offset', 'must be a non-negative integer');
  END IF;
  BEGIN
    v_from := nullif(p_from, '')::timestamptz;
    v_to := nullif(p_to, '')::timestamptz;
  EXCEPTION WHEN others THEN
    PERFORM queen.bad_request('from/to', 'must be ISO 8601 timestamps');
  END;

  WITH matching AS (
    SELECT d.id, d.failed_at
      FROM queen.dead_letters d
      JOIN queen.queues q ON q.id = d.queue_id
      LEFT JOIN queen.partitions p ON p.id = d.partition_id
     WHERE (p_queue IS NULL OR q.name = p_queue)
       AND (p_group IS NULL OR d.consumer_group = p_group)
       AND (p_partition IS NULL OR p.name = p_partition)
       AND (v_from IS NULL OR d.failed_at >= v_from)
       AND (v_to IS NULL OR d.failed_at <= v_to)
  )
  SELECT (SELECT count(*) FROM matching),
         coalesce((SELECT array_agg(m.id ORDER BY m.failed_at DESC, m.id DESC)
                     FROM (SELECT * FROM matching ORDER BY failed_at DESC, id DESC
                            LIMIT p_limit OFFSET p_offset) m), '{}')
    INTO total, ids;
END $$;

-- The dashboard's dead letters: newest first by id (the primary key), the
-- ids of a keyset page before `p_before` (`next_before` continues, null on
-- the last), and the total of the filter.
CREATE OR REPLACE FUNCTION queen.dlq_page(p_queue text, p_before bigint, p_limit integer,
                                          OUT total bigint, OUT ids bigint[], OUT next_before bigint)
LANGUAGE sql STABLE AS $$
  SELECT (SELECT count(*) FROM queen.dead_letters x JOIN queen.queues xq ON xq.id = x.queue_id
           WHERE p_queue IS NULL OR xq.name = p_queue),
         coalesce(array_agg(d.id ORDER BY d.id DESC), '{}'),
         CASE WHEN count(*) >= p_limit THEN min(d.id) END
    FROM (SELECT dl.id
            FROM queen.dead_letters dl
            JOIN queen.queues q ON q.id = dl.queue_id
           WHERE (p_queue IS NULL OR q.name = p_queue) AND (p_before IS NULL OR dl.id < p_before)
           ORDER BY dl.id DESC LIMIT p_limit) d
$$;

-- POST /api/v1/dlq/:id/replay, and the move behind
-- POST /api/v1/messages/:pid/:txn/retry (queen.message_retry): one dead-letter
-- record (one group's) goes back as a new message, by default on its own
-- lane, or on the named queue/partition (created by the push if missing; the
-- partition defaults to the record's partition name). One transaction: the
-- record is claimed FOR UPDATE, pushed through queen.push_rows (so the
-- maintenance switch, maxSize, ready lanes and encryption fence of a push
-- apply) with the transaction id `dlq:<record id>`, then removed. The
-- transaction id makes a repeated replay a duplicate in the destination's
-- dedup window; a concurrent replay of the same record waits on the row
-- lock and then finds it gone (404). A duplicate writes nothing and keeps
-- the record; a push refused by maxSize answers 409 and keeps it.
-- p_payload: the record's payload sealed by the engine, for a destination
-- encrypted at rest whose push refused the stored (plain) payload (QN409);
-- NULL pushes the payload as stored (a sealed one stays sealed).
-- `queued` names the queue to wake when a message went in (the engine
-- announces it after the commit, as for a push).
CREATE OR REPLACE FUNCTION queen.dlq_replay(p_id bigint, p_queue text, p_partition text, p_payload text,
  OUT result json, OUT queued text[])
LANGUAGE plpgsql AS $$
DECLARE
  d queen.dead_letters;
  v_queue text;
  v_part text;
  v_txid text := 'dlq:' || p_id;
  v_ids uuid[];
  v_verdicts text;
BEGIN
  SELECT * INTO d FROM queen.dead_letters WHERE id = p_id FOR UPDATE;
  IF d.id IS NULL THEN
    PERFORM queen.not_found('Dead letter');
  END IF;
  SELECT q.name, p.name INTO v_queue, v_part
    FROM queen.queues q LEFT JOIN queen.partitions p ON p.id = d.partition_id
   WHERE q.id = d.queue_id;
  v_queue := coalesce(p_queue, v_queue);
  v_part := coalesce(p_partition, v_part);
  IF v_part IS NULL THEN
    PERFORM queen.bad_request('partition', 'is required: the dead letter''s partition no longer exists');
  END IF;
  SELECT x.queued, x.ids, x.verdicts INTO queued, v_ids, v_verdicts
    FROM queen.push_rows(ARRAY[v_queue], ARRAY[v_part], ARRAY[v_txid], ARRAY[d.trace_id],
                         ARRAY[coalesce(p_payload, d.payload::text)], NULL, NULL, false,
                         ARRAY[d.producer_sub]) x;
  IF v_verdicts = 'f' THEN
    RAISE EXCEPTION USING ERRCODE = 'QNC09', MESSAGE = json_build_object(
      'error', 'Queue ''' || v_queue || ''' would exceed max capacity', 'code', 'queue_full')::text;
  END IF;
  IF v_verdicts = 'q' THEN
    DELETE FROM queen.dead_letters WHERE id = p_id;
  END IF;
  result := json_build_object(
    'result', CASE WHEN v_verdicts = 'q' THEN 'moved' ELSE 'duplicate' END,
    'consumerGroup', d.consumer_group, 'dlqId', d.id, 'originalTransactionId', d.transaction_id,
    'replayedAs', v_txid, 'queue', v_queue, 'partition', v_part, 'messageId', v_ids[1]);
END $$;

-- DELETE /api/v1/dlq?queue=Q[&consumerGroup=G]: one queue's dead-letter
-- records (or one group's of it), in one statement; answers how many.
CREATE OR REPLACE FUNCTION queen.dlq_purge(p_queue text, p_group text) RETURNS bigint
LANGUAGE sql AS $$
  WITH gone AS (
    DELETE FROM queen.dead_letters d
     USING queen.queues q
     WHERE q.name = p_queue AND d.queue_id = q.id AND (p_group IS NULL OR d.consumer_group = p_group)
    RETURNING 1
  )
  SELECT count(*) FROM gone
$$;
