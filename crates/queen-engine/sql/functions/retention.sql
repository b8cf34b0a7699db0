-- Retention and eviction, the queue options retentionSeconds and
-- completedRetentionSeconds (with retentionEnabled) and maxWaitTimeSeconds.
--
-- Each broker's sweeper calls queen.retention_sweep until it answers a NULL
-- next_after; each call is a short transaction of its own over at most
-- p_partitions partitions (keyset on partition id, after p_after), and
-- deletes at most p_batch messages per partition and rule, so it never
-- holds locks for long. created_at rises with seq in a partition (migration
-- 0008): the messages old enough to go are a run of offsets, found from the
-- lane's head (retention) or from its lowest cursor (eviction) without
-- walking younger ones. Many brokers: a call that finds the sweep lock
-- taken does nothing and says so (`busy`).
--
--   retention   messages older than retentionSeconds, consumed or not
--   completed   messages older than completedRetentionSeconds that every
--               group has consumed (below the lowest cursor; a partition
--               no group has read keeps everything)
--   eviction    unconsumed messages (at or above the lowest cursor)
--               older than maxWaitTimeSeconds; counted as `evicted`
CREATE OR REPLACE FUNCTION queen.retention_sweep(
  p_after uuid, p_partitions integer, p_batch integer,
  OUT next_after uuid, OUT retained bigint, OUT evicted bigint, OUT busy boolean)
LANGUAGE plpgsql AS $$
DECLARE
  r record;
  v_min bigint;
  v_keep_from timestamptz;
  v_done_before timestamptz;
  v_wait_before timestamptz;
  v_head timestamptz;
  v_visited integer := 0;
  v_n bigint;
BEGIN
  retained := 0;
  evicted := 0;
  busy := NOT pg_try_advisory_xact_lock(7245, 0);
  IF busy THEN
    next_after := p_after;
    RETURN;
  END IF;
  FOR r IN
    SELECT p.id, q.retention_enabled, q.retention_seconds, q.completed_retention_seconds,
           q.max_wait_time_seconds
      FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id
     WHERE (p_after IS NULL OR p.id > p_after)
       AND ((q.retention_enabled AND (q.retention_seconds > 0 OR q.completed_retention_seconds > 0))
            OR q.max_wait_time_seconds > 0)
     ORDER BY p.id
     LIMIT p_partitions
  LOOP
    v_visited := v_visited + 1;
    next_after := r.id;
    SELECT min(c.next_seq) INTO v_min FROM queen.cursors c WHERE c.partition_id = r.id;
    v_keep_from := CASE WHEN r.retention_enabled AND r.retention_seconds > 0
                        THEN now() - make_interval(secs => r.retention_seconds) END;
    v_done_before := CASE WHEN r.retention_enabled AND r.completed_retention_seconds > 0 AND v_min IS NOT NULL
                          THEN now() - make_interval(secs => r.completed_retention_seconds) END;
    v_wait_before := CASE WHEN r.max_wait_time_seconds > 0
                          THEN now() - make_interval(secs => r.max_wait_time_seconds) END;

    IF v_keep_from IS NOT NULL OR v_done_before IS NOT NULL THEN
      SELECT m.created_at INTO v_head FROM queen.messages m WHERE m.partition_id = r.id ORDER BY m.seq LIMIT 1;
      IF v_head < v_keep_from OR v_head < v_done_before THEN
        WITH head AS (
          SELECT m.seq, m.created_at FROM queen.messages m
           WHERE m.partition_id = r.id ORDER BY m.seq LIMIT p_batch
        ), gone AS (
          DELETE FROM queen.messages m USING head h
           WHERE m.partition_id = r.id AND m.seq = h.seq
             AND (h.created_at < v_keep_from OR (h.created_at < v_done_before AND h.seq < v_min))
          RETURNING 1
        )
        SELECT count(*) INTO v_n FROM gone;
        retained := retained + v_n;
      END IF;
    END IF;

    IF v_wait_before IS NOT NULL THEN
      SELECT m.created_at INTO v_head FROM queen.messages m
       WHERE m.partition_id = r.id AND m.seq >= coalesce(v_min, 0) ORDER BY m.seq LIMIT 1;
      IF v_head < v_wait_before THEN
        WITH waiting AS (
          SELECT m.seq, m.created_at FROM queen.messages m
           WHERE m.partition_id = r.id AND m.seq >= coalesce(v_min, 0) ORDER BY m.seq LIMIT p_batch
        ), gone AS (
          DELETE FROM queen.messages m USING waiting w
           WHERE m.partition_id = r.id AND m.seq = w.seq AND w.created_at < v_wait_before
          RETURNING 1
        )
        SELECT count(*) INTO v_n FROM gone;
        evicted := evicted + v_n;
      END IF;
    END IF;
  END LOOP;
  IF v_visited < p_partitions THEN
    next_after := NULL;
  END IF;
END $$;
