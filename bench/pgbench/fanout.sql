-- fan-out: a consumer of group g<client % groups> pops up to 10 messages of
-- a queue that every group reads in full, then acks them in one batch: the
-- SQL twin of GET /api/v1/pop/queue/bench-fan?batch=10&consumerGroup=g<n>
-- + POST /api/v1/ack/batch. Run with -D groups=<n>.
\set g :client_id % :groups
SELECT r::text AS popped FROM queen.pop('bench-fan', NULL, 'g' || :g, 10, 1, NULL, false, NULL, NULL) r \gset
SELECT queen.ack((SELECT json_agg(json_build_object('transactionId', m ->> 'transactionId',
                                                    'partitionId', m ->> 'partitionId',
                                                    'leaseId', m ->> 'leaseId', 'status', 'completed'))
                    FROM json_array_elements(nullif(:popped::text, '')::json -> 'messages') m), 'g' || :g)
 WHERE nullif(:popped::text, '') IS NOT NULL;
