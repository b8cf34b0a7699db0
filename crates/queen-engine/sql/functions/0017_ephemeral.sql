-- Ephemeral queues: ownership and declared configuration (the contents are
-- in the owner's memory, crates/queen-engine/src/ephemeral.rs).

-- Claims a queue for broker p_me unless a live broker (a heartbeat within
-- p_stale_seconds) owns it. Answers whether p_me owns it now, the owner's
-- URL, and the declared options (NULL: implicit). p_options, when given,
-- declares the configuration (configure); p_create false only looks
-- (depth, reset, delete of a queue no one declared do not create it).
CREATE OR REPLACE FUNCTION queen.ephemeral_claim(
  p_queue text, p_me uuid, p_url text, p_stale_seconds integer, p_create boolean,
  OUT mine boolean, OUT owner_url text, OUT options jsonb, OUT found boolean)
LANGUAGE plpgsql AS $$
DECLARE
  r queen.ephemeral_queues;
BEGIN
  SELECT * INTO r FROM queen.ephemeral_queues WHERE queue = p_queue FOR UPDATE;
  IF r.queue IS NULL THEN
    found := false;
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
  IF r.owner_id <> p_me AND r.heartbeat_at < now() - make_interval(secs => p_stale_seconds) THEN
    UPDATE queen.ephemeral_queues SET owner_id = p_me, owner_url = p_url, heartbeat_at = now()
     WHERE queue = p_queue
    RETURNING * INTO r;
  END IF;
  mine := r.owner_id = p_me;
  owner_url := r.owner_url;
  options := r.options;
END $$;
