-- Each broker's traffic per minute (messages pushed, pops that delivered,
-- messages acked), added by its registry heartbeat; the overview sums the
-- last hour over every broker. Rows older than two hours are deleted by
-- the heartbeats. Advisory only: nothing correct depends on it.
CREATE TABLE queen.broker_minutes (
    broker_id uuid NOT NULL,
    minute    timestamptz NOT NULL,
    pushed    bigint NOT NULL DEFAULT 0,
    popped    bigint NOT NULL DEFAULT 0,
    acked     bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (broker_id, minute)
);
CREATE INDEX broker_minutes_minute ON queen.broker_minutes (minute);
