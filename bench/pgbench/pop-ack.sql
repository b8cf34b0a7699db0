-- pop one message of this client's partition, then ack it: the SQL twin of
-- GET /api/v1/pop/queue/bench-pop/partition/p<n>?batch=1 + POST /api/v1/ack
-- (statements/ack.sql: typed arrays, one element per acknowledgment).
SELECT r.transaction_ids[1] AS tx, r.lane_ids[1] AS pid, r.lease_id AS lease
  FROM queen.pop('bench-pop', 'p' || :client_id, NULL, 1, 1, NULL, false, NULL, NULL) r \gset
SELECT queen.ack_rows(ARRAY[:tx::text], ARRAY[:pid::uuid], ARRAY['completed'], ARRAY[NULL::text],
                      ARRAY[:lease::text], ARRAY['__QUEUE_MODE__'])::text;
