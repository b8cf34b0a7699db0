-- The brokers serving this database, each upserting its row every few
-- seconds with what only it knows (its pool, its long polls, its memory);
-- a row silent for 30 s is a broker that is gone, and the next heartbeat of
-- any broker deletes it. Advisory only: nothing correct depends on it.
CREATE TABLE queen.brokers (
    id           uuid PRIMARY KEY,
    url          text NOT NULL,
    hostname     text NOT NULL,
    pid          integer NOT NULL,
    version      text NOT NULL,
    started_at   timestamptz NOT NULL,
    heartbeat_at timestamptz NOT NULL DEFAULT now(),
    figures      jsonb NOT NULL DEFAULT '{}'
);
