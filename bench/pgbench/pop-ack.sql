-- pop one message of this client's partition, then ack it: the SQL twin of
-- GET /api/v1/pop/queue/bench-pop/partition/p<n>?batch=1 + POST /api/v1/ack.
SELECT r::jsonb -> 'messages' -> 0 ->> 'transactionId' AS tx, r::jsonb ->> 'partitionId' AS pid,
       r::jsonb ->> 'leaseId' AS lease
  FROM queen.pop('bench-pop', 'p' || :client_id, NULL, 1, 1, NULL, false, NULL, NULL) r \gset
SELECT queen.ack(json_build_array(json_build_object('transactionId', :tx::text, 'partitionId', :pid::text,
                                                    'leaseId', :lease::text, 'status', 'completed')), NULL);
