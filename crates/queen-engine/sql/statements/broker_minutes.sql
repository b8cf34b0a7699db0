-- A broker's traffic since its last heartbeat ($2 pushed, $3 popped, $4
-- acked) added to the current minute's row (none written when all are 0),
-- and the rows older than two hours deleted.
WITH expired AS (
  DELETE FROM queen.broker_minutes WHERE minute < now() - interval '2 hours'
)
INSERT INTO queen.broker_minutes (broker_id, minute, pushed, popped, acked)
SELECT $1::uuid, date_trunc('minute', now()), $2::bigint, $3::bigint, $4::bigint
 WHERE $2::bigint <> 0 OR $3::bigint <> 0 OR $4::bigint <> 0
ON CONFLICT (broker_id, minute) DO UPDATE
  SET pushed = queen.broker_minutes.pushed + EXCLUDED.pushed,
      popped = queen.broker_minutes.popped + EXCLUDED.popped,
      acked  = queen.broker_minutes.acked + EXCLUDED.acked
