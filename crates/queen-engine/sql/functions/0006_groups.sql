-- Dead-letter listing and consumer-group administration.

-- GET /api/v1/dlq. Newest failures first.
CREATE OR REPLACE FUNCTION queen.dlq_list(
  p_queue text, p_group text, p_partition text, p_from text, p_to text, p_limit integer, p_offset integer)
RETURNS json
LANGUAGE plpgsql STABLE AS $$
DECLARE
  v_from timestamptz;
  v_to timestamptz;
  v_total bigint;
  v_rows json;
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
    SELECT d.*, q.name AS qname, p.name AS pname
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
         (SELECT json_agg(json_build_object(
            'dlqId', m.id, 'id', m.message_id, 'data', m.payload, 'errorMessage', m.error_message,
            'transactionId', m.transaction_id, 'traceId', m.trace_id, 'partitionId', m.partition_id,
            'producerSub', m.producer_sub, 'queue', m.qname, 'partition', m.pname, 'consumerGroup', m.consumer_group,
            'retryCount', m.retry_count, 'createdAt', queen.iso(m.created_at),
            'failedAt', queen.iso(m.failed_at)) ORDER BY m.failed_at DESC, m.id DESC)
            FROM (SELECT * FROM matching ORDER BY failed_at DESC, id DESC LIMIT p_limit OFFSET p_offset) m)
    INTO v_total, v_rows;
  RETURN json_build_object('messages', coalesce(v_rows, '[]'::json), 'total', v_total);
END $$;

-- The dashboard's dead letters: newest first by id (the primary key), a
-- keyset page before `p_before` (`nextBefore` continues, null on the last),
-- with dlq_list's fields and the total of the filter.
CREATE OR REPLACE FUNCTION queen.dlq_page(p_queue text, p_before bigint, p_limit integer) RETURNS json
LANGUAGE sql STABLE AS $$
  SELECT json_build_object(
           'messages', coalesce(json_agg(json_build_object(
             'dlqId', d.id, 'id', d.message_id, 'data', d.payload, 'errorMessage', d.error_message,
             'transactionId', d.transaction_id, 'traceId', d.trace_id, 'partitionId', d.partition_id,
             'producerSub', d.producer_sub, 'queue', d.qname, 'partition', d.pname,
             'consumerGroup', d.consumer_group, 'retryCount', d.retry_count,
             'createdAt', queen.iso(d.created_at), 'failedAt', queen.iso(d.failed_at)) ORDER BY d.id DESC),
             '[]'::json),
           'nextBefore', CASE WHEN count(*) >= p_limit THEN min(d.id) END,
           'total', (SELECT count(*) FROM queen.dead_letters x JOIN queen.queues xq ON xq.id = x.queue_id
                      WHERE p_queue IS NULL OR xq.name = p_queue))
    FROM (SELECT dl.*, q.name AS qname, p.name AS pname
            FROM queen.dead_letters dl
            JOIN queen.queues q ON q.id = dl.queue_id
            LEFT JOIN queen.partitions p ON p.id = dl.partition_id
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
                         ARRAY[d.producer_sub], NULL, NULL, true) x;
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

-- DELETE /api/v1/consumer-groups/:group[/queues/:queue]. With
-- deleteMetadata a later pop with the same name registers afresh; without it
-- the group restarts from its stored subscription. Queue mode is a group
-- like any other.
CREATE OR REPLACE FUNCTION queen.delete_consumer_group(p_group text, p_queue text, p_delete_metadata boolean)
RETURNS json
LANGUAGE plpgsql AS $$
DECLARE
  v_cursors bigint;
  v_meta bigint := 0;
BEGIN
  WITH gone AS (
    DELETE FROM queen.cursors c
     WHERE c.consumer_group = p_group
       AND (p_queue IS NULL OR c.queue_id = (SELECT id FROM queen.queues WHERE name = p_queue))
    RETURNING 1
  )
  SELECT count(*) INTO v_cursors FROM gone;
  IF p_delete_metadata THEN
    WITH gone AS (
      DELETE FROM queen.consumer_groups
       WHERE name = p_group AND (p_queue IS NULL OR queue_name = p_queue)
      RETURNING 1
    )
    SELECT count(*) INTO v_meta FROM gone;
  ELSE
    -- The registration stays, so the next pop will not register again: give
    -- the group fresh cursors at its stored start position now, or it would
    -- never see those lanes again. 'new' starts after the join time.
    INSERT INTO queen.cursors (partition_id, consumer_group, queue_id, next_seq, hold_until)
    SELECT p.id, g.name, q.id,
           CASE g.subscription_mode
             WHEN 'all' THEN 0
             WHEN 'new' THEN coalesce((SELECT min(m.seq) FROM queen.messages m
                                        WHERE m.partition_id = p.id AND m.created_at > g.created_at), p.next_seq)
             ELSE coalesce((SELECT min(m.seq) FROM queen.messages m
                             WHERE m.partition_id = p.id AND m.created_at >= g.subscription_from), p.next_seq)
           END,
           CASE WHEN g.subscription_mode = 'timestamp' AND g.subscription_from > now() THEN g.subscription_from END
      FROM queen.consumer_groups g
      JOIN queen.queues q ON q.name = g.queue_name
      JOIN queen.partitions p ON p.queue_id = q.id
     WHERE g.name = p_group AND (p_queue IS NULL OR g.queue_name = p_queue)
    ON CONFLICT DO NOTHING;
  END IF;
  RETURN json_build_object('success', true, 'consumerGroup', p_group, 'queueName', p_queue,
    'deletedPartitions', v_cursors, 'metadataDeleted', v_meta > 0);
END $$;

-- POST /api/v1/consumer-groups/:group/subscription: the start position for
-- lanes the group has not seen yet. Existing cursors stay where they are.
CREATE OR REPLACE FUNCTION queen.update_subscription(p_group text, p_timestamp text) RETURNS json
LANGUAGE plpgsql AS $$
DECLARE
  v_ts timestamptz;
  v_rows bigint;
BEGIN
  IF p_timestamp IS NULL OR p_timestamp = '' THEN
    PERFORM queen.bad_request('subscriptionTimestamp', 'is required (Missing subscriptionTimestamp in request body)');
  END IF;
  BEGIN
    v_ts := p_timestamp::timestamptz;
  EXCEPTION WHEN others THEN
    PERFORM queen.bad_request('subscriptionTimestamp', 'must be an ISO 8601 timestamp');
  END;
  WITH upd AS (
    UPDATE queen.consumer_groups SET subscription_mode = 'timestamp', subscription_from = v_ts
     WHERE name = p_group
    RETURNING 1
  )
  SELECT count(*) INTO v_rows FROM upd;
  RETURN json_build_object('success', true, 'consumerGroup', p_group,
    'newTimestamp', queen.iso(v_ts), 'rowsUpdated', v_rows);
END $$;

-- POST /api/v1/consumer-groups/:group/queues/:queue/seek, and with
-- p_partition .../partitions/:partition/seek: one rule for both. Moves the
-- cursors the group already has on the queue (or on that one partition) and
-- clears their leases, so a late ack of a skipped batch is a no-op.
CREATE OR REPLACE FUNCTION queen.seek(p_group text, p_queue text, p_to_end boolean, p_timestamp text,
                                      p_partition text DEFAULT NULL)
RETURNS json
LANGUAGE plpgsql AS $$
DECLARE
  v_ts timestamptz;
  v_rows bigint;
  v_partition uuid;
  v_next bigint;
BEGIN
  IF NOT coalesce(p_to_end, false) AND (p_timestamp IS NULL OR p_timestamp = '') THEN
    PERFORM queen.bad_request('toEnd', 'or timestamp is required: Must specify either ''toEnd'': true or ''timestamp''');
  END IF;
  IF NOT coalesce(p_to_end, false) THEN
    BEGIN
      v_ts := p_timestamp::timestamptz;
    EXCEPTION WHEN others THEN
      PERFORM queen.bad_request('timestamp', 'must be an ISO 8601 timestamp');
    END;
  END IF;
  -- Queen answers an unknown queue or partition "Partition not found".
  IF p_partition IS NOT NULL THEN
    SELECT p.id INTO v_partition
      FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id
     WHERE q.name = p_queue AND p.name = p_partition;
    IF v_partition IS NULL THEN
      PERFORM queen.not_found('Partition');
    END IF;
  END IF;
  WITH moved AS (
    UPDATE queen.cursors c SET
           next_seq = CASE WHEN p_to_end THEN p.next_seq
                      ELSE coalesce((SELECT min(m.seq) FROM queen.messages m
                                      WHERE m.partition_id = p.id AND m.created_at > v_ts), p.next_seq) END,
           lease_id = NULL, lease_expires_at = NULL, batch_end = NULL, retry_count = 0, retry_at = NULL,
           hold_until = NULL
      FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id
     WHERE c.partition_id = p.id AND c.consumer_group = p_group AND q.name = p_queue
       AND (v_partition IS NULL OR p.id = v_partition)
    RETURNING c.next_seq
  )
  SELECT count(*), max(next_seq) INTO v_rows, v_next FROM moved;
  IF v_partition IS NULL THEN
    RETURN json_build_object('success', true, 'consumerGroup', p_group, 'queueName', p_queue,
      'seekToEnd', coalesce(p_to_end, false), 'targetTimestamp', queen.iso(v_ts), 'partitionsUpdated', v_rows);
  END IF;
  -- Queen's shape, plus the queue-level fields. cursorMovedTo: the id of the
  -- last message the group is now past (null when none stored precedes it).
  RETURN json_build_object('success', true, 'consumerGroup', p_group, 'queueName', p_queue,
    'partitionName', p_partition, 'updated', v_rows > 0,
    'cursorMovedTo', (SELECT m.id FROM queen.messages m
                       WHERE m.partition_id = v_partition AND m.seq = v_next - 1),
    'seekToEnd', coalesce(p_to_end, false), 'targetTimestamp', queen.iso(v_ts), 'partitionsUpdated', v_rows);
END $$;
