-- plain end-to-end consumer of group g on queue bench-e2e: claim the
-- group's first free lane with a backlog (ready lanes, least recently
-- delivered first, FOR UPDATE OF the cursor SKIP LOCKED) and read up to
-- :batch messages (-D batch=1000) past its offset, in one statement; then
-- move the offset past them and the lane to the back of the order, one
-- commit. A lane this pop drains loses its ready row, as ours
-- (queen.pop_lane) removes the row of a lane it finds drained, and under
-- the same locks: the cursor's (held) and FOR SHARE SKIP LOCKED on the
-- partition row, so a push in flight (it holds the partition to its
-- commit) keeps the row, and the offset read under the lock is the latest
-- (a push that committed meanwhile keeps it too). Without the removal,
-- drained rows pile up at the front of the order (their delivered_at is
-- old) and every walk passes them. Nothing free: an empty pop, and the
-- next one follows at once (pgbench has no long poll).
BEGIN;
WITH lane AS MATERIALIZED (
  SELECT c.partition_id, c.next_seq, p.next_seq AS head
    FROM queen.ready_lanes r
    JOIN queen.cursors c ON c.partition_id = r.partition_id AND c.consumer_group = r.consumer_group
    JOIN queen.partitions p ON p.id = c.partition_id
   WHERE r.queue_id = (SELECT id FROM queen.queues WHERE name = 'bench-e2e') AND r.consumer_group = 'g'
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
   WHERE partition_id = :pid AND consumer_group = 'g'),
head AS MATERIALIZED (
  SELECT p.next_seq FROM queen.partitions p WHERE p.id = :pid FOR SHARE SKIP LOCKED),
gone AS (
  DELETE FROM queen.ready_lanes r USING head h
   WHERE r.partition_id = :pid AND r.consumer_group = 'g' AND h.next_seq <= :last::bigint + 1)
UPDATE queen.ready_lanes SET delivered_at = now()
 WHERE partition_id = :pid AND consumer_group = 'g'
   AND NOT EXISTS (SELECT 1 FROM head h WHERE h.next_seq <= :last::bigint + 1);
\else
WITH ack AS (
  UPDATE queen.cursors SET next_seq = :last::bigint + 1, last_delivered_at = now()
   WHERE partition_id = :pid AND consumer_group = 'g')
UPDATE queen.ready_lanes SET delivered_at = now() WHERE partition_id = :pid AND consumer_group = 'g';
\endif
COMMIT;
