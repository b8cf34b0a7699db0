-- retryDelay, ttl, retention and maxWaitTimeSeconds are enforced from here
-- on. Until now only the stored defaults were accepted, and they meant
-- "redeliver at once" (retryDelay 1000) and "never expire" (ttl 3600); the
-- defaults become 0, which says exactly that, and stored rows follow.
UPDATE queen.queues SET retry_delay = 0 WHERE retry_delay = 1000;
UPDATE queen.queues SET ttl = 0 WHERE ttl = 3600;
ALTER TABLE queen.queues
  ALTER COLUMN retry_delay SET DEFAULT 0,
  ALTER COLUMN ttl SET DEFAULT 0,
  ADD CONSTRAINT queues_retry_delay_check CHECK (retry_delay >= 0),
  ADD CONSTRAINT queues_ttl_check CHECK (ttl >= 0),
  ADD CONSTRAINT queues_retention_check
    CHECK (retention_seconds >= 0 AND completed_retention_seconds >= 0 AND max_wait_time_seconds >= 0);


-- A nacked lane is not claimed before this (now() + retryDelay at the nack).
ALTER TABLE queen.cursors ADD COLUMN retry_at timestamptz;
