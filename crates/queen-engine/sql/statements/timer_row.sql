-- GET /api/v1/timers/:queue/:key (timers.rs timer_row): queue, key. One row
-- when the timer is pending, its payload as stored.
SELECT t.queue, t.timer_key, t.partition, t.txn, t.message_id::text, t.deliver_at, t.attempts, t.last_error,
       t.created_at, t.updated_at, t.payload
  FROM queen.timer_row($1, $2) t
