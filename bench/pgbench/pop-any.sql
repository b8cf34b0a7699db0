-- pop one message from anywhere in a queue of many partitions (the broker
-- picks the lane), then ack it: the SQL twin of
-- GET /api/v1/pop/queue/bench-any?batch=1 + POST /api/v1/ack. A pop that
-- finds nothing free (more clients than free lanes) acks nothing (pgbench
-- hands a NULL from \gset on as an empty string).
SELECT r::jsonb -> 'messages' -> 0 ->> 'transactionId' AS tx, r::jsonb ->> 'partitionId' AS pid,
       r::jsonb ->> 'leaseId' AS lease
  FROM queen.pop('bench-any', NULL, NULL, 1, 1, NULL, false, NULL, NULL) r \gset
SELECT queen.ack_rows(ARRAY[:tx::text], ARRAY[nullif(:pid::text, '')::uuid], ARRAY['completed'],
                      ARRAY[NULL::text], ARRAY[:lease::text], ARRAY['__QUEUE_MODE__'])::text
 WHERE nullif(:tx::text, '') IS NOT NULL;
