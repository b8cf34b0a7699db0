-- Queen 1.6's queue options that had no column: minPopWaitTime (ms a long
-- poll may hold an under-full batch), and the retention sink hold (accepted
-- and stored; no sink exists here, so nothing acts on it).
ALTER TABLE queen.queues
    ADD COLUMN min_pop_wait_time integer NOT NULL DEFAULT 0 CHECK (min_pop_wait_time BETWEEN 0 AND 60000),
    ADD COLUMN retention_sink_hold text NOT NULL DEFAULT '',
    ADD COLUMN retention_sink_hold_max_seconds integer NOT NULL DEFAULT 604800
        CHECK (retention_sink_hold_max_seconds >= 0);
