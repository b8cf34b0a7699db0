-- The timer sweeper (timers.rs): seconds until the earliest pending timer is due
-- (negative: overdue; NULL: none).
SELECT extract(epoch FROM min(deliver_at) - statement_timestamp())::float8 FROM queen.timers
