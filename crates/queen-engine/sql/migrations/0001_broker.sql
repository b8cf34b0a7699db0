-- Broker core tables. Versioned: never edit a migration that has shipped;
-- add a new file instead. Functions live in ../functions and are replaced on
-- every start.

CREATE SCHEMA IF NOT EXISTS queen;

-- Time-ordered UUIDs (v7 layout): message ids sort by creation, which keeps
-- index inserts at the right edge of the btree.
CREATE OR REPLACE FUNCTION queen.uuid_v7() RETURNS uuid
LANGUAGE sql VOLATILE AS $$
  SELECT encode(
    set_bit(set_bit(
      overlay(uuid_send(gen_random_uuid())
              PLACING substring(int8send((extract(epoch FROM clock_timestamp()) * 1000)::bigint) FROM 3)
              FROM 1 FOR 6),
      52, 1), 53, 1), 'hex')::uuid
$$;

-- One row per queue; options are columns so CHECKs hold the invariants.
CREATE TABLE queen.queues (
    id                          bigserial PRIMARY KEY,
    name                        text NOT NULL UNIQUE CHECK (name <> '' AND length(name) <= 255),
    namespace                   text,
    task                        text,
    lease_time                  integer NOT NULL DEFAULT 300 CHECK (lease_time > 0),
    retry_limit                 integer NOT NULL DEFAULT 3 CHECK (retry_limit >= 0),
    retry_delay                 integer NOT NULL DEFAULT 1000,
    max_size                    integer NOT NULL DEFAULT 0 CHECK (max_size >= 0),
    ttl                         integer NOT NULL DEFAULT 3600,
    priority                    integer NOT NULL DEFAULT 0,
    dead_letter_queue           boolean NOT NULL DEFAULT true,
    dlq_after_max_retries       boolean NOT NULL DEFAULT true,
    delayed_processing          integer NOT NULL DEFAULT 0 CHECK (delayed_processing >= 0),
    window_buffer               integer NOT NULL DEFAULT 0 CHECK (window_buffer >= 0),
    retention_seconds           integer NOT NULL DEFAULT 0,
    completed_retention_seconds integer NOT NULL DEFAULT 0,
    retention_enabled           boolean NOT NULL DEFAULT false,
    encryption_enabled          boolean NOT NULL DEFAULT false,
    max_wait_time_seconds       integer NOT NULL DEFAULT 0,
    dedup_window_seconds        integer NOT NULL DEFAULT 3600 CHECK (dedup_window_seconds >= 0),
    created_at                  timestamptz NOT NULL DEFAULT now(),
    updated_at                  timestamptz NOT NULL DEFAULT now()
);

-- A FIFO lane. next_seq is the offset the next pushed message gets; pushes
-- hold this row's lock until commit, so offsets commit in order.
CREATE TABLE queen.partitions (
    id           uuid PRIMARY KEY DEFAULT queen.uuid_v7(),
    queue_id     bigint NOT NULL REFERENCES queen.queues (id) ON DELETE CASCADE,
    name         text NOT NULL CHECK (name <> '' AND length(name) <= 255),
    next_seq     bigint NOT NULL DEFAULT 0 CHECK (next_seq >= 0),
    last_push_at timestamptz,
    created_at   timestamptz NOT NULL DEFAULT now(),
    UNIQUE (queue_id, name)
);

-- The log. No foreign key: the push function holds the partition lock, and
-- queue deletion removes rows explicitly.
CREATE TABLE queen.messages (
    partition_id   uuid NOT NULL,
    seq            bigint NOT NULL CHECK (seq >= 0),
    id             uuid NOT NULL,
    transaction_id text NOT NULL,
    trace_id       text,
    payload        json,
    created_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (partition_id, seq)
);
-- The ack window and dedup lookups.
CREATE INDEX messages_transaction_idx ON queen.messages (partition_id, transaction_id);

-- Consumer-group registration, keyed by queue name so that a group can
-- register (and fix its start position) before the queue's first push.
CREATE TABLE queen.consumer_groups (
    queue_name        text NOT NULL,
    name              text NOT NULL CHECK (name <> ''),
    subscription_mode text NOT NULL CHECK (subscription_mode IN ('all', 'new', 'timestamp')),
    subscription_from timestamptz,
    created_at        timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (queue_name, name),
    CHECK ((subscription_mode = 'timestamp') = (subscription_from IS NOT NULL))
);

-- One cursor and lease per (partition, group). next_seq is the committed
-- offset: everything below it is done for this group.
CREATE TABLE queen.cursors (
    partition_id      uuid NOT NULL REFERENCES queen.partitions (id) ON DELETE CASCADE,
    consumer_group    text NOT NULL,
    queue_id          bigint NOT NULL,
    next_seq          bigint NOT NULL DEFAULT 0 CHECK (next_seq >= 0),
    lease_id          uuid,
    lease_expires_at  timestamptz,
    batch_end         bigint,
    retry_count       integer NOT NULL DEFAULT 0 CHECK (retry_count >= 0),
    last_delivered_at timestamptz,
    PRIMARY KEY (partition_id, consumer_group),
    CHECK ((lease_id IS NULL) = (lease_expires_at IS NULL)),
    CHECK ((lease_id IS NULL) OR (batch_end IS NOT NULL AND batch_end > next_seq))
);
CREATE INDEX cursors_queue_group_idx ON queen.cursors (queue_id, consumer_group);
CREATE INDEX cursors_lease_idx ON queen.cursors (lease_id) WHERE lease_id IS NOT NULL;

CREATE TABLE queen.dead_letters (
    id             bigserial PRIMARY KEY,
    queue_id       bigint NOT NULL,
    partition_id   uuid NOT NULL,
    consumer_group text NOT NULL,
    seq            bigint NOT NULL,
    message_id     uuid NOT NULL,
    transaction_id text NOT NULL,
    trace_id       text,
    payload        json,
    error_message  text NOT NULL,
    retry_count    integer NOT NULL,
    created_at     timestamptz NOT NULL,
    failed_at      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX dead_letters_queue_idx ON queen.dead_letters (queue_id, failed_at);
