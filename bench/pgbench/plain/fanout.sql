-- plain fan-out: a consumer of group g<client % groups> (-D groups=<n>)
-- takes up to 10 messages of one lane of queue bench-fan, which every group
-- reads in full: claim the group's first free lane with work (ready lanes,
-- least recently delivered first, SKIP LOCKED) and read up to 10 messages
-- from its offset, in one statement; then commit the offset past them and
-- move the lane to the back of the order.
\set g :client_id % :groups
BEGIN;
WITH lane AS (
  SELECT c.partition_id, c.next_seq
    FROM queen.ready_lanes r
    JOIN queen.cursors c ON c.partition_id = r.partition_id AND c.consumer_group = r.consumer_group
    JOIN queen.partitions p ON p.id = c.partition_id
   WHERE r.queue_id = (SELECT id FROM queen.queues WHERE name = 'bench-fan') AND r.consumer_group = 'g' || :g
     AND c.next_seq < p.next_seq
   ORDER BY r.delivered_at NULLS FIRST, r.partition_id
   LIMIT 1
     FOR UPDATE OF c SKIP LOCKED)
SELECT coalesce(max(m.seq), -1) AS last, max(m.partition_id::text) AS pid,
       json_agg(json_build_object('transactionId', m.transaction_id, 'data', m.payload) ORDER BY m.seq) AS msgs
  FROM lane l, LATERAL (SELECT * FROM queen.messages m
                         WHERE m.partition_id = l.partition_id AND m.seq >= l.next_seq
                         ORDER BY m.seq LIMIT 10) m \gset
\if :last >= 0
WITH ack AS (
  UPDATE queen.cursors SET next_seq = :last::bigint + 1, last_delivered_at = now()
   WHERE partition_id = :pid AND consumer_group = 'g' || :g)
UPDATE queen.ready_lanes SET delivered_at = now() WHERE partition_id = :pid AND consumer_group = 'g' || :g;
\endif
COMMIT;
