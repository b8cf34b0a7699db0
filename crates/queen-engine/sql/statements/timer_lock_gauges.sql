-- /metrics (Engine::timer_and_lock_gauges): pending timers, those already due, and
-- lock permits held, in one read.
SELECT (SELECT count(*) FROM queen.timers),
       (SELECT count(*) FROM queen.timers WHERE deliver_at <= now()),
       (SELECT count(*) FROM queen.kv WHERE ns = 'queen-locks' AND (expires_at IS NULL OR expires_at > now()))
