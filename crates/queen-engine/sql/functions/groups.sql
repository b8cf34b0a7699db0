-- Consumer-group administration: delete, subscription, seek (groups.rs, engine/groups.rs).

-- DELETE /api/v1/consumer-groups/:group[/queues/:queue]. With
-- deleteMetadata a later pop with the same name registers afresh; without it
-- the group restarts from its stored subscription. Queue mode is a group
-- like any other. Answers how many cursors went and whether the
-- registration did; the engine writes the answer (queen_wire::GroupDeleted).
CREATE OR REPLACE FUNCTION queen.delete_consumer_group(p_group text, p_queue text, p_delete_metadata boolean,
                                                       OUT deleted_partitions bigint, OUT metadata_deleted boolean)
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
  deleted_partitions := v_cursors;
  metadata_deleted := v_meta > 0;
END $$;

-- POST /api/v1/consumer-groups/:group/subscription: the start position for
-- lanes the group has not seen yet. Existing cursors stay where they are.
-- Answers the start and how many registrations took it (the engine writes
-- queen_wire::SubscriptionUpdated).
CREATE OR REPLACE FUNCTION queen.update_subscription(p_group text, p_timestamp text,
                                                     OUT new_timestamp text, OUT rows_updated bigint)
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
  new_timestamp := queen.iso(v_ts);
  rows_updated := v_rows;
END $$;

-- POST /api/v1/consumer-groups/:group/queues/:queue/seek, and with
-- p_partition .../partitions/:partition/seek: one rule for both. Moves the
-- cursors the group already has on the queue (or on that one partition) and
-- clears their leases, so a late ack of a skipped batch is a no-op.
-- Answers how many cursors moved, the target time, and with p_partition the
-- id of the last message the group is now past (NULL when none stored
-- precedes it); the engine writes the answer (queen_wire::Seeked, or with
-- p_partition queen_wire::PartitionSeeked).
CREATE OR REPLACE FUNCTION queen.seek(p_group text, p_queue text, p_to_end boolean, p_timestamp text,
                                      p_partition text,
                                      OUT partitions_updated bigint, OUT target_timestamp text,
                                      OUT cursor_moved_to uuid)
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
  partitions_updated := v_rows;
  target_timestamp := queen.iso(v_ts);
  IF v_partition IS NOT NULL THEN
    SELECT m.id INTO cursor_moved_to FROM queen.messages m
     WHERE m.partition_id = v_partition AND m.seq = v_next - 1;
  END IF;
END $$;
