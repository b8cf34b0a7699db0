-- plain pop + ack of up to :batch messages of a random one of :parts
-- partitions of queue bench-rand (-D batch=<b> -D parts=<P>), queue mode:
-- in one transaction, claim the partition's cursor (FOR UPDATE SKIP LOCKED,
-- one consumer per lane) and read up to :batch messages past its offset in
-- one statement, then commit the offset past them. As pop-ack.sql with a
-- batch: the open transaction's row lock plays the lease. A lane that is
-- taken or dry gives nothing (the aggregate still answers one row).
\set p random(0, :parts - 1)
BEGIN;
WITH lane AS (
  SELECT c.partition_id, c.next_seq
    FROM queen.partitions p
    JOIN queen.cursors c ON c.partition_id = p.id AND c.consumer_group = '__QUEUE_MODE__'
   WHERE p.queue_id = (SELECT id FROM queen.queues WHERE name = 'bench-rand') AND p.name = 'p' || :p
     FOR UPDATE OF c SKIP LOCKED)
SELECT coalesce(max(m.seq), -1) AS last, max(m.partition_id::text) AS pid,
       json_agg(json_build_object('transactionId', m.transaction_id, 'data', m.payload) ORDER BY m.seq) AS msgs
  FROM lane l, LATERAL (SELECT * FROM queen.messages m
                         WHERE m.partition_id = l.partition_id AND m.seq >= l.next_seq
                         ORDER BY m.seq LIMIT :batch) m \gset
\if :last >= 0
UPDATE queen.cursors SET next_seq = :last::bigint + 1 WHERE partition_id = :pid AND consumer_group = '__QUEUE_MODE__';
\endif
COMMIT;
