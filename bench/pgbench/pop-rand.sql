-- pop up to :batch messages of a random one of :parts partitions of queue
-- bench-rand (queue mode, no group), then ack all it got in one call: the
-- SQL twin of GET /api/v1/pop/queue/bench-rand/partition/p<r>?batch=<b>
-- + POST /api/v1/ack/batch (statements/ack.sql: typed arrays, one element
-- per acknowledgment). pop10-rand1k runs it with -D batch=10 -D parts=1000,
-- the pop-sweep series at 10k and 100k partitions too. An empty pop (a lane
-- run dry) acks nothing.
\set p random(0, :parts - 1)
SELECT r.transaction_ids AS txs, r.lane_ids[1] AS pid, r.lease_id AS lease, coalesce(cardinality(r.ids), 0) AS n
  FROM queen.pop('bench-rand', 'p' || :p, NULL, :batch, 1, NULL, false, NULL, NULL) r \gset
SELECT queen.ack_rows(nullif(:txs, '')::text[], array_fill(nullif(:pid, '')::uuid, ARRAY[:n::integer]),
                      array_fill('completed'::text, ARRAY[:n::integer]), array_fill(NULL::text, ARRAY[:n::integer]),
                      array_fill(nullif(:lease, '')::text, ARRAY[:n::integer]),
                      array_fill('__QUEUE_MODE__'::text, ARRAY[:n::integer]))::text
 WHERE :n::integer > 0;
