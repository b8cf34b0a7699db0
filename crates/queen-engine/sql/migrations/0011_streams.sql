-- Streams (/streams/v1, the Queen 2.x stream runtime): the query registry
-- and the state of each (query, source partition). Stream state is not
-- KV: it has no expiry (a closed window deletes its own row) and is written
-- only by a cycle, in the transaction that pushes the cycle's emits and
-- acks its source messages.
CREATE TABLE queen.stream_queries (
    -- The wire's query_id; a reset with a new config gives a new one, so
    -- runners of the old config are refused ("query not found").
    id           uuid PRIMARY KEY DEFAULT queen.uuid_v7(),
    name         text NOT NULL UNIQUE CHECK (name <> '' AND length(name) <= 255),
    source_queue text NOT NULL CHECK (length(source_queue) <= 255),
    sink_queue   text CHECK (length(sink_queue) <= 255),
    config_hash  text NOT NULL CHECK (config_hash <> '' AND length(config_hash) <= 128),
    created_at   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now(),
    reset_at     timestamptz
);

-- No foreign keys: a cycle takes the query row's KEY SHARE lock once; a
-- reset and a queue deletion delete their rows themselves.
CREATE TABLE queen.stream_state (
    query_id     uuid NOT NULL,
    partition_id uuid NOT NULL,            -- the source partition
    key          text COLLATE "C" NOT NULL CHECK (octet_length(key) <= 1024),
    value        jsonb NOT NULL,
    updated_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (query_id, partition_id, key)
);
