-- fan-out: a consumer of group g<client % groups> pops up to 10 messages of
-- a queue that every group reads in full, then acks them in one batch: the
-- SQL twin of GET /api/v1/pop/queue/bench-fan?batch=10&consumerGroup=g<n>
-- + POST /api/v1/ack/batch (statements/ack.sql). Run with -D groups=<n>.
\set g :client_id % :groups
SELECT r.transaction_ids AS txs, r.lane_ids[1] AS pid, r.lease_id AS lease, coalesce(cardinality(r.ids), 0) AS n
  FROM queen.pop('bench-fan', NULL, 'g' || :g, 10, 1, NULL, false, NULL, NULL) r \gset
SELECT queen.ack_rows(nullif(:txs, '')::text[], array_fill(nullif(:pid, '')::uuid, ARRAY[:n::integer]),
                      array_fill('completed'::text, ARRAY[:n::integer]), array_fill(NULL::text, ARRAY[:n::integer]),
                      array_fill(nullif(:lease, '')::text, ARRAY[:n::integer]),
                      array_fill('g' || :g, ARRAY[:n::integer]))::text
 WHERE :n::integer > 0;
