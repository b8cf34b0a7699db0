-- GET /api/v1/timers/:queue (timers.rs timer_page): queue, after, limit. Up
-- to limit rows and one more when more follow; no payloads (NULL).
SELECT t.queue, t.timer_key, t.partition, t.txn, t.message_id::text, t.deliver_at, t.attempts, t.last_error,
       t.created_at, t.updated_at, t.payload
  FROM queen.timer_page($1, $2, $3) t
