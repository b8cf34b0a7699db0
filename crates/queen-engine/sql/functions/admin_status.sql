-- Observability read models: trace events, per-group depth, queue detail
-- and time-bucketed analytics. All computed live from the tables (no
-- counters to drift), so every broker on the database answers the same.

-- An optional ISO 8601 query parameter; anything unparsable is a 400.
CREATE OR REPLACE FUNCTION queen.timestamp_param(p_field text, p_value text) RETURNS timestamptz
LANGUAGE plpgsql STABLE AS $$
BEGIN
  IF p_value IS NULL OR p_value = '' THEN
    RETURN NULL;
  END IF;
  RETURN p_value::timestamptz;
EXCEPTION WHEN invalid_datetime_format OR datetime_field_overflow OR invalid_parameter_value THEN
  PERFORM queen.bad_request(p_field, 'must be an ISO 8601 timestamp');
  RETURN NULL;
END $$;

-- POST /api/v1/traces. 201 {"success", "traceId"}; the message must exist
-- (a 404, not the 500 the v1 broker answered).
CREATE OR REPLACE FUNCTION queen.trace_add(p_body json) RETURNS json
LANGUAGE plpgsql AS $$
DECLARE
  v_tx text;
  v_pid uuid;
  v_names text[];
  v_id uuid;
  v_type text;
BEGIN
  IF json_typeof(p_body) IS DISTINCT FROM 'object' THEN
    PERFORM queen.bad_request('body', 'must be a JSON object');
  END IF;
  v_tx := queen.json_text(p_body, 'transactionId', '', true);
  IF queen.json_text(p_body, 'partitionId', '', true) !~* '^[0-9a-f]{8}-?([0-9a-f]{4}-?){3}[0-9a-f]{12}$' THEN
    PERFORM queen.bad_request('partitionId', 'must be a UUID');
  END IF;
  v_pid := (p_body ->> 'partitionId')::uuid;
  IF json_typeof(p_body -> 'data') IS NULL OR json_typeof(p_body -> 'data') = 'null' THEN
    PERFORM queen.bad_request('data', 'is required');
  END IF;
  v_type := coalesce(queen.json_text(p_body, 'eventType', ''), 'info');
  IF length(v_type) > 64 THEN
    PERFORM queen.bad_request('eventType', 'must be at most 64 characters');
  END IF;
  CASE json_typeof(p_body -> 'traceNames')
    WHEN 'string' THEN v_names := ARRAY[p_body ->> 'traceNames'];
    WHEN 'array' THEN
      IF EXISTS (SELECT 1 FROM json_array_elements(p_body -> 'traceNames') e WHERE json_typeof(e) <> 'string') THEN
        PERFORM queen.bad_request('traceNames', 'must be a string or an array of strings');
      END IF;
      SELECT coalesce(array_agg(DISTINCT e), '{}') INTO v_names
        FROM json_array_elements_text(p_body -> 'traceNames') e WHERE e <> '';
    WHEN 'null' THEN v_names := '{}';
    ELSE
      IF p_body -> 'traceNames' IS NOT NULL THEN
        PERFORM queen.bad_request('traceNames', 'must be a string or an array of strings');
      END IF;
      v_names := '{}';
  END CASE;
  IF NOT EXISTS (SELECT 1 FROM queen.messages WHERE partition_id = v_pid AND transaction_id = v_tx) THEN
    PERFORM queen.not_found('Message');
  END IF;
  INSERT INTO queen.message_traces (partition_id, transaction_id, consumer_group, event_type, data, trace_names)
  VALUES (v_pid, v_tx, queen.json_text(p_body, 'consumerGroup', ''), v_type, (p_body -> 'data')::jsonb, v_names)
  RETURNING id INTO v_id;
  RETURN json_build_object('success', true, 'traceId', v_id);
END $$;

CREATE OR REPLACE FUNCTION queen.trace_json(t queen.message_traces) RETURNS json
LANGUAGE sql STABLE AS $$
  SELECT json_build_object('id', t.id, 'event_type', t.event_type, 'data', t.data,
    'consumer_group', t.consumer_group, 'worker_id', NULL, 'created_at', queen.iso(t.created_at),
    'trace_names', to_json(t.trace_names))
$$;

-- GET /api/v1/traces/{partitionId}/{transactionId}: oldest first.
CREATE OR REPLACE FUNCTION queen.traces_for_message(p_pid uuid, p_tx text) RETURNS json
LANGUAGE sql STABLE AS $$
  SELECT json_build_object('traces', coalesce(json_agg(queen.trace_json(t) ORDER BY t.created_at, t.id), '[]'::json))
    FROM queen.message_traces t
   WHERE t.partition_id = p_pid AND t.transaction_id = p_tx
$$;

-- GET /api/v1/traces/by-name/{name}: newest first, with the message.
CREATE OR REPLACE FUNCTION queen.traces_by_name(p_name text, p_limit integer, p_offset integer) RETURNS json
LANGUAGE sql STABLE AS $$
  SELECT json_build_object(
    'traces', coalesce((SELECT json_agg(x.j ORDER BY x.created_at DESC, x.id DESC) FROM (
        SELECT t.created_at, t.id,
               -- The payload is spliced in as text: a sealed payload (encryption at
               -- rest) holds a \u0000 key that jsonb refuses, and the engine opens it.
               (left((queen.trace_json(t)::jsonb || jsonb_build_object('transaction_id', t.transaction_id,
                  'partition_id', t.partition_id, 'queue_name', q.name, 'partition_name', p.name))::text, -1)
                || ', "message_payload": ' || coalesce(m.payload::text, 'null') || '}')::json AS j
          FROM queen.message_traces t
          LEFT JOIN queen.partitions p ON p.id = t.partition_id
          LEFT JOIN queen.queues q ON q.id = p.queue_id
          LEFT JOIN LATERAL (SELECT m.payload FROM queen.messages m
                              WHERE m.partition_id = t.partition_id AND m.transaction_id = t.transaction_id
                              ORDER BY m.seq DESC LIMIT 1) m ON true
         WHERE t.trace_names @> ARRAY[p_name]
         ORDER BY t.created_at DESC, t.id DESC
         LIMIT p_limit OFFSET p_offset) x), '[]'::json),
    'total', (SELECT count(*) FROM queen.message_traces t WHERE t.trace_names @> ARRAY[p_name]),
    'pagination', json_build_object('limit', p_limit, 'offset', p_offset))
$$;

-- GET /api/v1/traces/names: every name with its counts, most recent first.
CREATE OR REPLACE FUNCTION queen.trace_names(p_limit integer, p_offset integer) RETURNS json
LANGUAGE sql STABLE AS $$
  WITH names AS (
    SELECT n AS trace_name, count(*) AS trace_count,
           count(DISTINCT (t.partition_id, t.transaction_id)) AS message_count, max(t.created_at) AS last_seen
      FROM queen.message_traces t CROSS JOIN LATERAL unnest(t.trace_names) n
     GROUP BY n)
  SELECT json_build_object(
    'trace_names', coalesce((SELECT json_agg(json_build_object('trace_name', x.trace_name,
        'trace_count', x.trace_count, 'message_count', x.message_count, 'last_seen', queen.iso(x.last_seen))
        ORDER BY x.last_seen DESC, x.trace_name)
      FROM (SELECT * FROM names ORDER BY last_seen DESC, trace_name LIMIT p_limit OFFSET p_offset) x), '[]'::json),
    'total', (SELECT count(*) FROM names),
    'pagination', json_build_object('limit', p_limit, 'offset', p_offset))
$$;

-- GET /api/v1/resources/queues/{queue}/depth[?group=]: watermark
-- arithmetic per partition. A named group reads its own cursor, no group
-- reads queue mode's (as every other queue-level count here does); a lane
-- without that cursor owes everything. `depth` (visible now, queue mode)
-- and the oldest age keep their meaning for existing readers.
CREATE OR REPLACE FUNCTION queen.resources_queue_depth(p_name text, p_group text) RETURNS json
LANGUAGE plpgsql STABLE AS $$
DECLARE
  r record;
  v_parts json;
  v_pending bigint;
  v_owing bigint;
BEGIN
  SELECT * INTO r FROM queen.queue_depths() d WHERE d.queue = p_name;
  IF r.queue IS NULL THEN
    PERFORM queen.not_found('Queue');
  END IF;
  SELECT coalesce(json_agg(json_build_object('partition', x.name, 'pending', x.pending) ORDER BY x.name), '[]'::json),
         coalesce(sum(x.pending), 0), count(*) FILTER (WHERE x.pending > 0)
    INTO v_parts, v_pending, v_owing
    FROM (SELECT p.name,
                 (SELECT count(*) FROM queen.messages m
                   WHERE m.partition_id = p.id
                     AND m.seq >= coalesce((SELECT c.next_seq FROM queen.cursors c
                                             WHERE c.partition_id = p.id
                                               AND c.consumer_group = coalesce(p_group, queen.queue_mode())), 0)) AS pending
            FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id
           WHERE q.name = p_name) x;
  RETURN json_build_object('queue', r.queue, 'group', p_group, 'pending', v_pending,
    'partitionsPending', v_owing, 'conflation', false, 'effectivePending', v_pending,
    'partitions', v_parts,
    'depth', r.depth, 'oldestMessageAgeSeconds', r.oldest_age_seconds, 'deadLetters', r.dead_letters);
END $$;

-- GET /api/v1/status/queues/{queue}: the queue with its partitions, its
-- groups and its depth, in one read.
CREATE OR REPLACE FUNCTION queen.status_queue(p_name text) RETURNS json
LANGUAGE sql STABLE AS $$
  SELECT (queen.resources_queue(p_name)::jsonb
          || jsonb_build_object('queue', p_name,
               'depth', queen.resources_queue_depth(p_name, NULL)::jsonb,
               'consumerGroups', coalesce((SELECT jsonb_agg(g) FROM json_array_elements(queen.consumer_groups_list(NULL, NULL)) g
                                            WHERE g ->> 'queueName' = p_name), '[]'::jsonb)))::json
$$;

-- GET /api/v1/status/analytics: messages pushed and dead-lettered per time
-- bucket (minute, hour or day) between from and to (default: the last 24 h).
CREATE OR REPLACE FUNCTION queen.status_analytics(p_interval text, p_from timestamptz, p_to timestamptz,
                                                  p_queue text) RETURNS json
LANGUAGE plpgsql STABLE AS $$
DECLARE
  v_to timestamptz := coalesce(p_to, now());
  v_from timestamptz := coalesce(p_from, coalesce(p_to, now()) - interval '24 hours');
  v_unit text := coalesce(p_interval, 'hour');
  v_span interval;
BEGIN
  IF v_unit NOT IN ('minute', 'hour', 'day') THEN
    PERFORM queen.bad_request('interval', 'must be minute, hour or day');
  END IF;
  IF v_from > v_to THEN
    PERFORM queen.bad_request('from', 'must not be after to');
  END IF;
  v_span := CASE v_unit WHEN 'minute' THEN interval '7 days' ELSE interval '400 days' END;
  IF v_to - v_from > v_span THEN
    PERFORM queen.bad_request('from', 'spans too many ' || v_unit || 's');
  END IF;
  RETURN (
    WITH pushed AS (
      SELECT date_trunc(v_unit, m.created_at) AS b, count(*) AS n
        FROM queen.messages m JOIN queen.partitions p ON p.id = m.partition_id
        JOIN queen.queues q ON q.id = p.queue_id
       WHERE m.created_at >= v_from AND m.created_at < v_to AND (p_queue IS NULL OR q.name = p_queue)
       GROUP BY 1),
    dead AS (
      SELECT date_trunc(v_unit, d.failed_at) AS b, count(*) AS n
        FROM queen.dead_letters d JOIN queen.queues q ON q.id = d.queue_id
       WHERE d.failed_at >= v_from AND d.failed_at < v_to AND (p_queue IS NULL OR q.name = p_queue)
       GROUP BY 1),
    buckets AS (
      SELECT coalesce(p.b, d.b) AS b, coalesce(p.n, 0) AS pushed, coalesce(d.n, 0) AS dead
        FROM pushed p FULL JOIN dead d ON d.b = p.b)
    SELECT json_build_object('interval', v_unit, 'from', queen.iso(v_from), 'to', queen.iso(v_to), 'queue', p_queue,
      'buckets', coalesce((SELECT json_agg(json_build_object('bucket', queen.iso(b), 'pushed', pushed,
                   'deadLettered', dead) ORDER BY b) FROM buckets), '[]'::json),
      'totals', json_build_object('pushed', (SELECT coalesce(sum(pushed), 0) FROM buckets),
                                  'deadLettered', (SELECT coalesce(sum(dead), 0) FROM buckets)))
  );
END $$;

-- GET /api/v1/analytics/system-metrics, the database half (the broker adds
-- its own process figures).
CREATE OR REPLACE FUNCTION queen.database_metrics() RETURNS json
LANGUAGE sql STABLE AS $$
  SELECT json_build_object('version', current_setting('server_version'),
    'sizeBytes', pg_database_size(current_database()),
    'connections', (SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()),
    'maxConnections', current_setting('max_connections')::int,
    'activeQueries', (SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND state = 'active'))
$$;
