-- pop up to :batch messages of a random one of :parts partitions of queue
-- bench-rand (queue mode, no group), then ack all it got in one call: the
-- SQL twin of GET /api/v1/pop/queue/bench-rand/partition/p<r>?batch=<b>
-- + POST /api/v1/ack/batch (statements/ack.sql: typed arrays, one element
-- per acknowledgment). pop10-rand1k runs it with -D batch=10 -D parts=1000,
-- the pop-sweep series at 10k and 100k partitions too. An empty pop (a lane
-- run dry) acks nothing.
\set p random(0, :parts - 1)
SELECT r::text AS popped FROM queen.pop('bench-rand', 'p' || :p, NULL, :batch, 1, NULL, false, NULL, NULL) r \gset
SELECT queen.ack_rows(array_agg(m ->> 'transactionId'), array_agg((m ->> 'partitionId')::uuid),
                      array_agg('completed'::text), array_agg(NULL::text), array_agg(m ->> 'leaseId'),
                      array_agg('__QUEUE_MODE__'::text))::text
  FROM json_array_elements(nullif(:popped::text, '')::json -> 'messages') m
HAVING count(*) > 0;
