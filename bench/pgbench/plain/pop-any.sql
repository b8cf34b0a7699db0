-- plain pop + ack of up to :batch messages anywhere in queue :queue, queue
-- mode (-D batch=<b> -D queue=<name>): claim the first free lane with a
-- backlog in the queue's ready lanes (queen.ready_lanes, the index our
-- triggers and pushes keep of lanes that may hold work), least recently
-- delivered first (FOR UPDATE OF the cursor SKIP LOCKED), and read up to
-- :batch messages past its offset, in one statement; then commit the
-- offset past them and move the lane to the back of the order. A lane this
-- pop drains loses its ready row, as our queen.pop_lane removes the row of
-- a lane it finds drained and under the same locks: the cursor's (held)
-- and a share lock on the partition row taken with SKIP LOCKED, so that a
-- push in flight (it holds the partition FOR NO KEY UPDATE to its commit)
-- keeps the row, and the partition's offset read under that lock is the
-- latest; without it, drained lanes would pile up in the index and every
-- walk would pass them. Nothing free: an empty pop, as ours counts it.
BEGIN;
WITH lane AS MATERIALIZED (
  SELECT c.partition_id, c.next_seq, p.next_seq AS head
    FROM queen.ready_lanes r
    JOIN queen.cursors c ON c.partition_id = r.partition_id AND c.consumer_group = r.consumer_group
    JOIN queen.partitions p ON p.id = c.partition_id
   WHERE r.queue_id = (SELECT id FROM queen.queues WHERE name = :queue) AND r.consumer_group = '__QUEUE_MODE__'
     AND c.next_seq < p.next_seq
   ORDER BY r.delivered_at NULLS FIRST, r.partition_id
   LIMIT 1
     FOR UPDATE OF c SKIP LOCKED)
SELECT coalesce(max(m.seq), -1) AS last, max(m.partition_id::text) AS pid,
       coalesce((max(m.seq) + 1 >= max(l.head))::int, 0) AS drained,
       json_agg(json_build_object('transactionId', m.transaction_id, 'data', m.payload) ORDER BY m.seq) AS msgs
  FROM lane l, LATERAL (SELECT * FROM queen.messages m
                         WHERE m.partition_id = l.partition_id AND m.seq >= l.next_seq
                         ORDER BY m.seq LIMIT :batch) m \gset
\if :last < 0
\elif :drained
WITH ack AS (
  UPDATE queen.cursors SET next_seq = :last::bigint + 1, last_delivered_at = now()
   WHERE partition_id = :pid AND consumer_group = '__QUEUE_MODE__'),
head AS MATERIALIZED (
  SELECT p.next_seq FROM queen.partitions p WHERE p.id = :pid FOR SHARE SKIP LOCKED),
gone AS (
  DELETE FROM queen.ready_lanes r USING head h
   WHERE r.partition_id = :pid AND r.consumer_group = '__QUEUE_MODE__' AND h.next_seq <= :last::bigint + 1)
UPDATE queen.ready_lanes SET delivered_at = now()
 WHERE partition_id = :pid AND consumer_group = '__QUEUE_MODE__'
   AND NOT EXISTS (SELECT 1 FROM head h WHERE h.next_seq <= :last::bigint + 1);
\else
WITH ack AS (
  UPDATE queen.cursors SET next_seq = :last::bigint + 1, last_delivered_at = now()
   WHERE partition_id = :pid AND consumer_group = '__QUEUE_MODE__')
UPDATE queen.ready_lanes SET delivered_at = now() WHERE partition_id = :pid AND consumer_group = '__QUEUE_MODE__';
\endif
COMMIT;
