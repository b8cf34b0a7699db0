-- Operator pages at scale: counts come from offsets, and a queue too large
-- to count on every page view is counted by a background loop.

-- Dead letters by partition and offset: the queue page counts them per
-- partition, and the message list marks a message that is one.
CREATE INDEX dead_letters_partition_idx ON queen.dead_letters (partition_id, seq);

-- A large queue's counts as of computed_at (queen.refresh_queue_gauge
-- writes them; queen.queue_counts reads them in place of counting). Only
-- queues of at least the gauge threshold of partitions have a row.
CREATE TABLE queen.queue_gauges (
    queue_id    bigint PRIMARY KEY REFERENCES queen.queues (id) ON DELETE CASCADE,
    partitions  bigint NOT NULL,
    total       bigint NOT NULL,
    completed   bigint NOT NULL,
    processing  bigint NOT NULL,
    pending     bigint NOT NULL,
    dead_letter bigint NOT NULL,
    oldest_at   timestamptz,
    groups      json NOT NULL,
    took_ms     integer NOT NULL,
    computed_at timestamptz NOT NULL
);
