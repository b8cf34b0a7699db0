-- Ephemeral queues: ownership and declared configuration (the contents are
-- in the owner's memory, crates/queen-engine/src/ephemeral.rs).
--
-- Fencing: an owner serves a queue only while its last renewal that
-- succeeded was sent less than half the takeover time ago (its own
-- monotonic clock); another broker takes over only once heartbeat_at is
-- older than the whole takeover time (judged on clock_timestamp(), while
-- heartbeat_at is a renewal's transaction start, never later than its
-- sending). A takeover bumps the epoch, and a renewal names the epoch it
-- holds: one that arrives late renews nothing.

-- Claims a queue for broker p_me unless a live broker (a heartbeat within
-- p_stale_seconds) owns it. Answers whether p_me owns it now (a claim by
-- the owner renews it), the owner's URL, the declared options (NULL:
-- implicit) and the ownership epoch. p_create false only looks (depth,
-- reset, delete of a queue no one declared do not create it).
CREATE OR REPLACE FUNCTION queen.ephemeral_claim(
  p_queue text, p_me uuid, p_url text, p_stale_seconds integer, p_create boolean,
  OUT mine boolean, OUT owner_url text, OUT options jsonb, OUT found boolean, OUT owner_epoch bigint)
LANGUAGE plpgsql AS $$
DECLARE
  r queen.ephemeral_queues;
  v_existed boolean := true;
BEGIN
  SELECT * INTO r FROM queen.ephemeral_queues WHERE queue = p_queue FOR UPDATE;
  IF r.queue IS NULL THEN
    found := false;
    v_existed := false;
    IF NOT p_create THEN
      mine := true;
      RETURN;
    END IF;
    INSERT INTO queen.ephemeral_queues (queue, owner_id, owner_url)
    VALUES (p_queue, p_me, p_url)
    ON CONFLICT (queue) DO NOTHING
    RETURNING * INTO r;
    IF r.queue IS NULL THEN
      SELECT * INTO r FROM queen.ephemeral_queues WHERE queue = p_queue FOR UPDATE;
    END IF;
  ELSE
    found := true;
  END IF;
  IF r.owner_id <> p_me AND r.heartbeat_at < clock_timestamp() - make_interval(secs => p_stale_seconds) THEN
    UPDATE queen.ephemeral_queues e
       SET owner_id = p_me, owner_url = p_url, heartbeat_at = now(), epoch = e.epoch + 1
     WHERE e.queue = p_queue
    RETURNING * INTO r;
  ELSIF r.owner_id = p_me AND v_existed THEN
    UPDATE queen.ephemeral_queues e SET heartbeat_at = now() WHERE e.queue = p_queue
    RETURNING * INTO r;
  END IF;
  mine := r.owner_id = p_me;
  owner_url := r.owner_url;
  options := r.options;
  owner_epoch := r.epoch;
END $$;

-- An owner's heartbeat: renews the queues it holds, each at the epoch it
-- holds it with; answers those renewed (a queue missing from the answer
-- was taken over, or deleted, and its copy is dropped).
CREATE OR REPLACE FUNCTION queen.ephemeral_renew(p_me uuid, p_queues text[], p_epochs bigint[])
RETURNS SETOF text
LANGUAGE sql AS $$
  UPDATE queen.ephemeral_queues e SET heartbeat_at = now()
    FROM unnest(p_queues, p_epochs) h(queue, epoch)
   WHERE e.queue = h.queue AND e.epoch = h.epoch AND e.owner_id = p_me
  RETURNING e.queue
$$;
