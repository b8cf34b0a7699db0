-- fan-out: a consumer of group g<client % groups> pops up to 10 messages of
-- a queue that every group reads in full, then acks them in one batch: the
-- SQL twin of GET /api/v1/pop/queue/bench-fan?batch=10&consumerGroup=g<n>
-- + POST /api/v1/ack/batch (statements/ack.sql). Run with -D groups=<n>.
\set g :client_id % :groups
SELECT r::text AS popped FROM queen.pop('bench-fan', NULL, 'g' || :g, 10, 1, NULL, false, NULL, NULL) r \gset
SELECT queen.ack_rows(array_agg(m ->> 'transactionId'), array_agg((m ->> 'partitionId')::uuid),
                      array_agg('completed'::text), array_agg(NULL::text), array_agg(m ->> 'leaseId'),
                      array_agg('g' || :g))::text
  FROM json_array_elements(nullif(:popped::text, '')::json -> 'messages') m
HAVING count(*) > 0;
