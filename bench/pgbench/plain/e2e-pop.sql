-- plain end-to-end consumer of group g on queue bench-e2e: claim the
-- group's first free lane with a backlog (ready lanes, least recently
-- delivered first, FOR UPDATE SKIP LOCKED), read up to :batch messages
-- (-D batch=1000) past its offset in one statement, then move the offset
-- past them and the lane to the back of the order, one commit (as
-- fanout.sql, with a larger batch). Nothing free: an empty pop, and the
-- next one follows at once (pgbench has no long poll).
BEGIN;
WITH lane AS (
  SELECT c.partition_id, c.next_seq
    FROM queen.ready_lanes r
    JOIN queen.cursors c ON c.partition_id = r.partition_id AND c.consumer_group = r.consumer_group
    JOIN queen.partitions p ON p.id = c.partition_id
   WHERE r.queue_id = (SELECT id FROM queen.queues WHERE name = 'bench-e2e') AND r.consumer_group = 'g'
     AND c.next_seq < p.next_seq
   ORDER BY r.delivered_at NULLS FIRST, r.partition_id
   LIMIT 1
     FOR UPDATE OF c SKIP LOCKED)
SELECT coalesce(max(m.seq), -1) AS last, max(m.partition_id::text) AS pid,
       json_agg(json_build_object('transactionId', m.transaction_id, 'data', m.payload) ORDER BY m.seq) AS msgs
  FROM lane l, LATERAL (SELECT * FROM queen.messages m
                         WHERE m.partition_id = l.partition_id AND m.seq >= l.next_seq
                         ORDER BY m.seq LIMIT :batch) m \gset
\if :last >= 0
WITH ack AS (
  UPDATE queen.cursors SET next_seq = :last::bigint + 1, last_delivered_at = now()
   WHERE partition_id = :pid AND consumer_group = 'g')
UPDATE queen.ready_lanes SET delivered_at = now() WHERE partition_id = :pid AND consumer_group = 'g';
\endif
COMMIT;
