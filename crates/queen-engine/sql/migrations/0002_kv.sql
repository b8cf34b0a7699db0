-- KV state: one table, versions from one sequence.

-- Versions are global, positive and never re-issued, so a key that expired
-- and is written again gets a higher version than it ever had (lock tokens
-- and fences rely on that).
CREATE SEQUENCE queen.kv_version_seq AS bigint MINVALUE 1;

-- ns and key under COLLATE "C": ordering is byte order, prefixes are byte
-- ranges. A row whose expires_at <= now() does not exist for any operation,
-- whether or not the sweeper has deleted it yet.
CREATE TABLE queen.kv (
    ns         text COLLATE "C" NOT NULL CHECK (ns ~ '^[a-z0-9][a-z0-9._-]{0,63}$'),
    key        text COLLATE "C" NOT NULL CHECK (octet_length(key) BETWEEN 1 AND 512),
    value      jsonb NOT NULL,
    version    bigint NOT NULL CHECK (version > 0),
    expires_at timestamptz,
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (ns, key)
);
-- The sweeper's scan.
CREATE INDEX kv_expires_idx ON queen.kv (expires_at) WHERE expires_at IS NOT NULL;
