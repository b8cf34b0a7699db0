-- pop up to :batch messages from anywhere in queue :queue (the broker picks
-- the lane; queue mode), then ack all it got in one call: the SQL twin of
-- GET /api/v1/pop/queue/<queue>?batch=<b> + POST /api/v1/ack (batch 1:
-- pop-any, queue bench-any) or /api/v1/ack/batch (the pop-sweep series,
-- queue bench-rand); statements/ack.sql: typed arrays, one element per
-- acknowledgment. Run with -D batch=<b> -D queue=<name>. A pop that finds
-- nothing free (more clients than free lanes) acks nothing.
SELECT r.transaction_ids AS txs, r.lane_ids[1] AS pid, r.lease_id AS lease, coalesce(cardinality(r.ids), 0) AS n
  FROM queen.pop(:queue, NULL, NULL, :batch, 1, NULL, false, NULL, NULL) r \gset
SELECT queen.ack_rows(nullif(:txs, '')::text[], array_fill(nullif(:pid, '')::uuid, ARRAY[:n::integer]),
                      array_fill('completed'::text, ARRAY[:n::integer]), array_fill(NULL::text, ARRAY[:n::integer]),
                      array_fill(nullif(:lease, '')::text, ARRAY[:n::integer]),
                      array_fill('__QUEUE_MODE__'::text, ARRAY[:n::integer]))::text
 WHERE :n::integer > 0;
