-- Trace events: timeline entries a consumer records against a message
-- (`POST /api/v1/traces`, the client's `msg.trace()`). Keyed by the
-- message's (partition, transactionId) rather than a foreign key, so a
-- trace outlives nothing it should not: deleting a queue removes its rows
-- explicitly (queen.delete_queue) and the sweep of deleted partitions is
-- by partition_id.
CREATE TABLE queen.message_traces (
    id             uuid PRIMARY KEY DEFAULT queen.uuid_v7(),
    partition_id   uuid NOT NULL,
    transaction_id text NOT NULL,
    consumer_group text,
    event_type     text NOT NULL DEFAULT 'info' CHECK (length(event_type) <= 64),
    data           jsonb NOT NULL,
    trace_names    text[] NOT NULL DEFAULT '{}',
    created_at     timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX message_traces_message_idx ON queen.message_traces (partition_id, transaction_id, created_at);
CREATE INDEX message_traces_names_idx ON queen.message_traces USING gin (trace_names);
