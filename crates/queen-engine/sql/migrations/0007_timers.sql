-- Timers: a scheduled message waits here, never in the message log, so
-- pops never walk it. One row per (queue, key): schedule and reschedule are
-- one upsert. The sweeper fires a due row as one message, in the same
-- transaction that deletes the row, so a timer fires exactly once.
CREATE TABLE queen.timers (
    queue_name     text NOT NULL CHECK (queue_name <> '' AND length(queue_name) <= 255),
    timer_key      text COLLATE "C" NOT NULL CHECK (octet_length(timer_key) BETWEEN 1 AND 1024),
    partition_name text NOT NULL CHECK (partition_name <> '' AND length(partition_name) <= 255),
    payload        json NOT NULL,
    txn            text NOT NULL CHECK (txn <> ''),
    -- Promised at schedule time; the fired message keeps it.
    message_id     uuid NOT NULL,
    deliver_at     timestamptz NOT NULL,
    -- Fires that could not push (a full queue): retried with a back-off.
    attempts       integer NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    last_error     text,
    created_at     timestamptz NOT NULL DEFAULT now(),
    updated_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (queue_name, timer_key)
);
-- The sweeper's scan.
CREATE INDEX timers_due_idx ON queen.timers (deliver_at);
