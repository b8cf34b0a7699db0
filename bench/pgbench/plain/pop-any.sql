-- plain pop + ack of one message anywhere in queue bench-any: walk the
-- queue's ready lanes (queen.ready_lanes, the index our triggers keep of
-- lanes that may hold work) least recently delivered first, claim the first
-- free cursor that has a message at its offset (SKIP LOCKED) and read it, in
-- one statement; then commit the offset and move the lane to the back of
-- the order (without that every pop would walk the drained lanes again).
-- Nothing free: an empty pop, as ours counts it.
BEGIN;
SELECT coalesce(x.seq, -1) AS seq, x.pid, x.tx, x.data
  FROM (VALUES (1)) d LEFT JOIN LATERAL (
    SELECT c.partition_id AS pid, m.seq, m.transaction_id AS tx, m.payload AS data
      FROM queen.ready_lanes r
      JOIN queen.cursors c ON c.partition_id = r.partition_id AND c.consumer_group = r.consumer_group
      JOIN queen.messages m ON m.partition_id = c.partition_id AND m.seq = c.next_seq
     WHERE r.queue_id = (SELECT id FROM queen.queues WHERE name = 'bench-any') AND r.consumer_group = '__QUEUE_MODE__'
     ORDER BY r.delivered_at NULLS FIRST, r.partition_id
     LIMIT 1
       FOR UPDATE OF c SKIP LOCKED) x ON true \gset
\if :seq >= 0
WITH ack AS (
  UPDATE queen.cursors SET next_seq = :seq::bigint + 1, last_delivered_at = now()
   WHERE partition_id = :pid AND consumer_group = '__QUEUE_MODE__')
UPDATE queen.ready_lanes SET delivered_at = now() WHERE partition_id = :pid AND consumer_group = '__QUEUE_MODE__';
\endif
COMMIT;
