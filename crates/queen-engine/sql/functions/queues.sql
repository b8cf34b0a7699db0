-- Queue configuration and deletion.

-- The effective options as the wire names them.
CREATE OR REPLACE FUNCTION queen.queue_options(q queen.queues) RETURNS json
LANGUAGE sql STABLE AS $$
  SELECT json_build_object(
    'leaseTime', q.lease_time, 'retryLimit', q.retry_limit, 'retryDelay', q.retry_delay,
    'maxSize', q.max_size, 'ttl', q.ttl, 'priority', q.priority,
    'deadLetterQueue', q.dead_letter_queue, 'dlqAfterMaxRetries', q.dlq_after_max_retries,
    'delayedProcessing', q.delayed_processing, 'windowBuffer', q.window_buffer,
    'retentionSeconds', q.retention_seconds, 'completedRetentionSeconds', q.completed_retention_seconds,
    'retentionEnabled', q.retention_enabled, 'encryptionEnabled', q.encryption_enabled,
    'maxWaitTimeSeconds', q.max_wait_time_seconds, 'dedupWindowSeconds', q.dedup_window_seconds,
    'minPopWaitTime', q.min_pop_wait_time, 'retentionSinkHold', q.retention_sink_hold,
    'retentionSinkHoldMaxSeconds', q.retention_sink_hold_max_seconds)
$$;

-- The options Queen 1.6 accepts that this broker stores but does not act on
-- (there is no retention sink to hold for); answered beside the options.
CREATE OR REPLACE FUNCTION queen.options_not_acted_on() RETURNS json
LANGUAGE sql IMMUTABLE AS $$
  SELECT '["retentionSinkHold", "retentionSinkHoldMaxSeconds"]'::json
$$;

-- POST /api/v1/configure. Merges: an absent option keeps its stored value;
-- "mode": "replace" resets every absent option to its default first.
-- Every option is enforced. retryDelay (ms) and ttl (s) default to 0:
-- redeliver at once, never expire. encryptionEnabled is refused by the
-- engine when the broker has no key (it seals payloads, sealing.rs).
-- Locks: the queue row (FOR NO KEY UPDATE via UPDATE).
-- p_key_id: the fingerprint of the configuring broker's encryption key; an
-- encrypted queue keeps its key id until a broker whose current key is
-- another, and which holds the old one, starts (it moves the id; sealing.rs).
CREATE OR REPLACE FUNCTION queen.configure(p_body json, p_key_id text) RETURNS json
LANGUAGE plpgsql AS $$
DECLARE
  v_name text;
  v_opts json;
  v_mode text;
  v_key text;
  v_known text[] := ARRAY['leaseTime','retryLimit','retryDelay','maxSize','ttl','priority',
    'deadLetterQueue','dlqAfterMaxRetries','delayedProcessing','windowBuffer','retentionSeconds',
    'completedRetentionSeconds','retentionEnabled','encryptionEnabled','maxWaitTimeSeconds',
    'dedupWindowSeconds','minPopWaitTime','retentionSinkHold','retentionSinkHoldMaxSeconds'];
  v_sink_hold text;
  d queen.queues;
  q queen.queues;
  v_was_encrypted boolean;
BEGIN
  IF json_typeof(p_body) IS DISTINCT FROM 'object' THEN
    PERFORM queen.bad_request('body', 'must be a JSON object');
  END IF;
  v_name := queen.json_text(p_body, 'queue', '', true);
  PERFORM queen.json_text(p_body, 'namespace', '');
  PERFORM queen.json_text(p_body, 'task', '');
  v_mode := coalesce(queen.json_text(p_body, 'mode', ''), 'merge');
  IF v_mode NOT IN ('merge', 'replace') THEN
    PERFORM queen.bad_request('mode', 'must be "merge" or "replace"');
  END IF;
  v_opts := coalesce(p_body -> 'options', '{}'::json);
  IF json_typeof(v_opts) = 'null' THEN
    v_opts := '{}'::json;
  END IF;
  IF json_typeof(v_opts) <> 'object' THEN
    PERFORM queen.bad_request('options', 'must be an object');
  END IF;
  FOR v_key IN SELECT json_object_keys(v_opts) LOOP
    IF NOT v_key = ANY (v_known) THEN
      PERFORM queen.bad_request('options.' || v_key, 'is not a known queue option');
    END IF;
  END LOOP;

  -- A sink's name, as Queen checks it.
  v_sink_hold := queen.json_text(v_opts, 'retentionSinkHold', 'options.');
  IF v_sink_hold IS NOT NULL AND v_sink_hold !~ '^[A-Za-z0-9_-]{0,255}$' THEN
    PERFORM queen.bad_request('options.retentionSinkHold', 'must be a sink name: letters, digits, "_" or "-"');
  END IF;

  INSERT INTO queen.queues (name) VALUES (v_name) ON CONFLICT (name) DO NOTHING;
  SELECT * INTO q FROM queen.queues WHERE name = v_name FOR NO KEY UPDATE;
  IF v_mode = 'replace' THEN
    d := q;
    d.lease_time := 300; d.retry_limit := 3; d.retry_delay := 0; d.max_size := 0; d.ttl := 0;
    d.priority := 0; d.dead_letter_queue := true; d.dlq_after_max_retries := true;
    d.delayed_processing := 0; d.window_buffer := 0; d.retention_seconds := 0;
    d.completed_retention_seconds := 0; d.retention_enabled := false; d.encryption_enabled := false;
    d.max_wait_time_seconds := 0; d.dedup_window_seconds := 3600;
    d.min_pop_wait_time := 0; d.retention_sink_hold := ''; d.retention_sink_hold_max_seconds := 604800;
  ELSE
    d := q;
  END IF;
  v_was_encrypted := q.encryption_enabled;

  UPDATE queen.queues SET
    namespace = coalesce(p_body ->> 'namespace', CASE WHEN v_mode = 'replace' THEN NULL ELSE namespace END),
    task = coalesce(p_body ->> 'task', CASE WHEN v_mode = 'replace' THEN NULL ELSE task END),
    lease_time = coalesce(queen.json_int(v_opts, 'leaseTime', 'options.', 1), d.lease_time),
    retry_limit = coalesce(queen.json_int(v_opts, 'retryLimit', 'options.', 0), d.retry_limit),
    retry_delay = coalesce(queen.json_int(v_opts, 'retryDelay', 'options.', 0), d.retry_delay),
    max_size = coalesce(queen.json_int(v_opts, 'maxSize', 'options.', 0), d.max_size),
    ttl = coalesce(queen.json_int(v_opts, 'ttl', 'options.', 0), d.ttl),
    priority = coalesce(queen.json_int(v_opts, 'priority', 'options.', -2147483648), d.priority),
    dead_letter_queue = coalesce(queen.json_bool(v_opts, 'deadLetterQueue', 'options.'), d.dead_letter_queue),
    dlq_after_max_retries = coalesce(queen.json_bool(v_opts, 'dlqAfterMaxRetries', 'options.'), d.dlq_after_max_retries),
    delayed_processing = coalesce(queen.json_int(v_opts, 'delayedProcessing', 'options.', 0), d.delayed_processing),
    window_buffer = coalesce(queen.json_int(v_opts, 'windowBuffer', 'options.', 0), d.window_buffer),
    retention_seconds = coalesce(queen.json_int(v_opts, 'retentionSeconds', 'options.', 0), d.retention_seconds),
    completed_retention_seconds = coalesce(queen.json_int(v_opts, 'completedRetentionSeconds', 'options.', 0), d.completed_retention_seconds),
    retention_enabled = coalesce(queen.json_bool(v_opts, 'retentionEnabled', 'options.'), d.retention_enabled),
    encryption_enabled = coalesce(queen.json_bool(v_opts, 'encryptionEnabled', 'options.'), d.encryption_enabled),
    max_wait_time_seconds = coalesce(queen.json_int(v_opts, 'maxWaitTimeSeconds', 'options.', 0), d.max_wait_time_seconds),
    dedup_window_seconds = coalesce(queen.json_int(v_opts, 'dedupWindowSeconds', 'options.', 0), d.dedup_window_seconds),
    -- Clamped rather than refused, as Queen does.
    min_pop_wait_time = coalesce(least(greatest(
      queen.json_int(v_opts, 'minPopWaitTime', 'options.', -2147483648), 0), 60000), d.min_pop_wait_time),
    retention_sink_hold = coalesce(v_sink_hold, d.retention_sink_hold),
    retention_sink_hold_max_seconds = coalesce(
      queen.json_int(v_opts, 'retentionSinkHoldMaxSeconds', 'options.', 0), d.retention_sink_hold_max_seconds),
    updated_at = now()
  WHERE id = q.id
  RETURNING * INTO q;

  IF q.encryption_enabled AND (v_opts ->> 'encryptionEnabled') = 'true' THEN
    IF p_key_id IS NULL THEN
      PERFORM queen.bad_request('options.encryptionEnabled', 'needs QUEEN_ENCRYPTION_KEY on this broker');
    ELSIF q.encryption_key_id IS NULL THEN
      UPDATE queen.queues SET encryption_key_id = p_key_id WHERE id = q.id;
      INSERT INTO queen.encryption_keys (key_id) VALUES (p_key_id) ON CONFLICT DO NOTHING;
    ELSIF q.encryption_key_id <> p_key_id THEN
      PERFORM queen.bad_request('options.encryptionEnabled',
        'is on with another key (id ' || q.encryption_key_id || ') than this broker''s (id ' || p_key_id || ')');
    END IF;
  END IF;
  -- Turning encryption on waits for every push holding a partition of the
  -- queue (push_rows reads the flag after its partition lock): none that
  -- missed the flag commits after this configure, and the engine's sealing
  -- pass after it (sealing.rs) finds the rows of every push before it.
  IF q.encryption_enabled AND NOT v_was_encrypted THEN
    PERFORM 1 FROM queen.partitions p WHERE p.queue_id = q.id ORDER BY p.id FOR NO KEY UPDATE;
  END IF;

  RETURN json_build_object('configured', true, 'queue', q.name, 'namespace', q.namespace,
    'task', q.task, 'options', queen.queue_options(q), 'optionsNotActedOn', queen.options_not_acted_on());
END $$;

-- DELETE /api/v1/resources/queues/:queue. Answers deleted:false for a
-- missing queue, because SDKs delete before create as a cleanup idiom.
-- Answers whether the queue existed; the engine writes the answer
-- (queen_wire::QueueDeleted).
CREATE OR REPLACE FUNCTION queen.delete_queue(p_name text, OUT existed boolean)
LANGUAGE plpgsql AS $$
DECLARE
  v_id bigint;
BEGIN
  SELECT id INTO v_id FROM queen.queues WHERE name = p_name FOR UPDATE;
  DELETE FROM queen.consumer_groups WHERE queue_name = p_name;
  IF v_id IS NULL THEN
    existed := false;
    RETURN;
  END IF;
  DELETE FROM queen.message_traces t USING queen.partitions p WHERE p.queue_id = v_id AND t.partition_id = p.id;
  DELETE FROM queen.stream_state s USING queen.partitions p WHERE p.queue_id = v_id AND s.partition_id = p.id;
  DELETE FROM queen.messages m USING queen.partitions p WHERE p.queue_id = v_id AND m.partition_id = p.id;
  DELETE FROM queen.dead_letters WHERE queue_id = v_id;
  DELETE FROM queen.queues WHERE id = v_id;
  existed := true;
END $$;
