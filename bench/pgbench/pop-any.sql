-- pop up to :batch messages from anywhere in queue :queue (the broker picks
-- the lane; queue mode), then ack all it got in one call: the SQL twin of
-- GET /api/v1/pop/queue/<queue>?batch=<b> + POST /api/v1/ack (batch 1:
-- pop-any, queue bench-any) or /api/v1/ack/batch (the pop-sweep series,
-- queue bench-rand); statements/ack.sql: typed arrays, one element per
-- acknowledgment. Run with -D batch=<b> -D queue=<name>. A pop that finds
-- nothing free (more clients than free lanes) acks nothing.
SELECT r::text AS popped FROM queen.pop(:queue, NULL, NULL, :batch, 1, NULL, false, NULL, NULL) r \gset
SELECT queen.ack_rows(array_agg(m ->> 'transactionId'), array_agg((m ->> 'partitionId')::uuid),
                      array_agg('completed'::text), array_agg(NULL::text), array_agg(m ->> 'leaseId'),
                      array_agg('__QUEUE_MODE__'::text))::text
  FROM json_array_elements(nullif(:popped::text, '')::json -> 'messages') m
HAVING count(*) > 0;
