-- Reads by offset. A message's offset is its seq: per partition, from 0 in
-- push order, drawn under the partition's lock, so it costs the push path
-- nothing. Reads take no lease and move no cursor. The request is checked
-- in Rust (reads.rs).

-- One fetch call: entries answered in request order. Records of an entry
-- stop at its byte budget and at the call's, but an entry that starts
-- within the call's budget always gets at least one record, so a record
-- larger than the budget is still readable. Answers typed columns, and the
-- engine writes the answer (reads.rs): per entry its error (NULL when it
-- read), high watermark, log start and record count; per record, entry
-- after entry, its offset, transaction id, payload text and time.
CREATE OR REPLACE FUNCTION queen.fetch(
  p_queues text[], p_partitions text[], p_offsets bigint[], p_max_bytes bigint[],
  p_call_max_bytes bigint, p_max_records integer,
  OUT errors text[], OUT high_watermarks bigint[], OUT log_starts bigint[], OUT record_counts integer[],
  OUT offsets bigint[], OUT transaction_ids text[], OUT payloads text[], OUT times text[])
LANGUAGE plpgsql STABLE AS $$
DECLARE
  i integer;
  v_part record;
  v_start bigint;
  v_left bigint := p_call_max_bytes;
  v_entry_left bigint;
  v_count integer;
  r record;
BEGIN
  errors := '{}';
  high_watermarks := '{}';
  log_starts := '{}';
  record_counts := '{}';
  offsets := '{}';
  transaction_ids := '{}';
  payloads := '{}';
  times := '{}';
  FOR i IN 1 .. coalesce(array_length(p_queues, 1), 0) LOOP
    SELECT p.id, p.next_seq INTO v_part
      FROM queen.queues q JOIN queen.partitions p ON p.queue_id = q.id
     WHERE q.name = p_queues[i] AND p.name = p_partitions[i];
    IF NOT FOUND THEN
      errors := errors || 'UNKNOWN_TOPIC_OR_PARTITION'::text;
      high_watermarks := high_watermarks || 0::bigint;
      log_starts := log_starts || 0::bigint;
      record_counts := record_counts || 0;
      CONTINUE;
    END IF;
    -- Offsets below next_seq are committed (the push that drew them moved
    -- next_seq in its own transaction), so nothing at or past it is read.
    SELECT coalesce(min(m.seq), v_part.next_seq) INTO v_start
      FROM queen.messages m WHERE m.partition_id = v_part.id AND m.seq < v_part.next_seq;
    high_watermarks := high_watermarks || v_part.next_seq;
    log_starts := log_starts || v_start;
    IF p_offsets[i] < v_start OR p_offsets[i] > v_part.next_seq THEN
      errors := errors || 'OFFSET_OUT_OF_RANGE'::text;
      record_counts := record_counts || 0;
      CONTINUE;
    END IF;
    errors := errors || NULL::text;
    v_count := 0;
    v_entry_left := p_max_bytes[i];
    IF v_left > 0 THEN
      FOR r IN
        SELECT m.seq, m.transaction_id, m.payload, m.created_at,
               coalesce(octet_length(m.payload::text), 4) + octet_length(m.transaction_id) AS size
          FROM queen.messages m
         WHERE m.partition_id = v_part.id AND m.seq >= p_offsets[i] AND m.seq < v_part.next_seq
         ORDER BY m.seq
         LIMIT p_max_records
      LOOP
        EXIT WHEN v_count > 0 AND (r.size > v_entry_left OR r.size > v_left);
        offsets := offsets || r.seq;
        transaction_ids := transaction_ids || r.transaction_id;
        payloads := payloads || coalesce(r.payload::text, 'null');
        times := times || queen.iso(r.created_at);
        v_count := v_count + 1;
        v_entry_left := v_entry_left - r.size;
        v_left := v_left - r.size;
      END LOOP;
    END IF;
    record_counts := record_counts || v_count;
  END LOOP;
END $$;

-- A time every write is counted by: no transaction that has written and
-- not yet committed started before it, so a partition it has not seen yet
-- will show a later lastWriteAt. Sessions of other roles are invisible to
-- an unprivileged broker; one role per database is the supported set-up.
CREATE OR REPLACE FUNCTION queen.safe_time() RETURNS timestamptz
LANGUAGE sql STABLE AS $$
  SELECT least(statement_timestamp(),
               (SELECT min(a.xact_start) FROM pg_stat_activity a
                 WHERE a.datname = current_database() AND a.backend_xid IS NOT NULL
                   AND a.pid <> pg_backend_pid()))
$$;

-- One page of partitions of each entry's queue written at or after `since`,
-- in creation order (ids are time-ordered), after the id `after`. Answers
-- the safe time, whether each entry's queue exists and how many rows it
-- gave (up to its limit and one more when more follow), then each row's
-- fields as arrays, entry after entry; the engine writes the answer
-- (queen_wire::PartitionsChanged).
CREATE OR REPLACE FUNCTION queen.partitions_changed(
  p_queues text[], p_limits integer[], p_since text[], p_after uuid[],
  OUT safe_time text, OUT known boolean[], OUT sizes integer[], OUT names text[], OUT ids uuid[],
  OUT last_offsets bigint[], OUT log_starts bigint[], OUT last_writes text[])
LANGUAGE plpgsql STABLE SET timezone = 'UTC' AS $$
DECLARE
  i integer;
  v_queue_id bigint;
  v_since timestamptz;
  v_page record;
BEGIN
  safe_time := queen.iso(queen.safe_time());
  known := '{}';
  sizes := '{}';
  names := '{}';
  ids := '{}';
  last_offsets := '{}';
  log_starts := '{}';
  last_writes := '{}';
  FOR i IN 1 .. coalesce(array_length(p_queues, 1), 0) LOOP
    SELECT q.id INTO v_queue_id FROM queen.queues q WHERE q.name = p_queues[i];
    IF NOT FOUND THEN
      known := known || false;
      sizes := sizes || 0;
      CONTINUE;
    END IF;
    v_since := NULL;
    IF p_since[i] IS NOT NULL THEN
      BEGIN
        v_since := p_since[i]::timestamptz;
      EXCEPTION WHEN datetime_field_overflow OR invalid_datetime_format OR invalid_text_representation THEN
        PERFORM queen.bad_request(format('entries[%s].since', i - 1), 'must be an ISO-8601 time');
      END;
    END IF;
    WITH page AS (
      SELECT p.id, p.name, p.next_seq, p.last_push_at
        FROM queen.partitions p
       WHERE p.queue_id = v_queue_id
         AND (p_after[i] IS NULL OR p.id > p_after[i])
         AND (v_since IS NULL OR p.last_push_at >= v_since)
       ORDER BY p.id
       LIMIT p_limits[i] + 1
    )
    SELECT count(*)::integer AS n,
           coalesce(array_agg(pg.name ORDER BY pg.id), '{}') AS names,
           coalesce(array_agg(pg.id ORDER BY pg.id), '{}') AS ids,
           coalesce(array_agg(pg.next_seq - 1 ORDER BY pg.id), '{}') AS last_offsets,
           coalesce(array_agg(coalesce((SELECT min(m.seq) FROM queen.messages m
                                         WHERE m.partition_id = pg.id AND m.seq < pg.next_seq), pg.next_seq)
                              ORDER BY pg.id), '{}') AS log_starts,
           coalesce(array_agg(queen.iso(pg.last_push_at) ORDER BY pg.id), '{}') AS last_writes
      INTO v_page
      FROM page pg;
    known := known || true;
    sizes := sizes || v_page.n;
    names := names || v_page.names;
    ids := ids || v_page.ids;
    last_offsets := last_offsets || v_page.last_offsets;
    log_starts := log_starts || v_page.log_starts;
    last_writes := last_writes || v_page.last_writes;
  END LOOP;
END $$;
