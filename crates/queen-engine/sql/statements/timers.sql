-- One timers call (timers.rs, TimerColumns): ops, queues, keys, partitions,
-- payloads (JSON text), delays in ms, txns; the caller's JWT sub. Answers
-- each op's outcome, txn, promised id and due time in op order; the engine
-- writes the call's answer.
SELECT t.statuses, t.txns, t.message_ids::text[], t.deliver_ats
  FROM queen.timer_apply($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::bigint[], $7::text[],
                         $8::text) t
