-- Ephemeral queues live in one broker's memory (lost on restart, by
-- design). PostgreSQL records only which broker owns each queue (so the
-- others can send callers to it) and the declared configuration, which
-- outlives the contents: a queue comes back configured and empty.
CREATE TABLE queen.ephemeral_queues (
    queue        text PRIMARY KEY CHECK (queue <> '' AND length(queue) <= 255),
    options      jsonb,                 -- NULL: implicit (created by a push or pop)
    owner_id     uuid NOT NULL,
    owner_url    text NOT NULL,
    heartbeat_at timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX ephemeral_queues_owner_idx ON queen.ephemeral_queues (owner_id);
