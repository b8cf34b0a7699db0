-- plain pop + ack of one message of this client's partition of bench-pop:
-- claim the cursor row (FOR UPDATE SKIP LOCKED, one consumer per lane) and
-- read the message at its offset in one statement, then commit the offset.
-- The open transaction's row lock plays the lease: a consumer that dies
-- rolls back and the message is delivered again. (LEFT JOIN LATERAL: one
-- row even when the lane is drained or taken, so \gset always has a row.)
BEGIN;
SELECT coalesce(x.seq, -1) AS seq, x.pid, x.tx, x.data
  FROM (VALUES (1)) d LEFT JOIN LATERAL (
    SELECT c.partition_id AS pid, m.seq, m.transaction_id AS tx, m.payload AS data
      FROM queen.partitions p
      JOIN queen.cursors c ON c.partition_id = p.id AND c.consumer_group = '__QUEUE_MODE__'
      JOIN queen.messages m ON m.partition_id = c.partition_id AND m.seq = c.next_seq
     WHERE p.queue_id = (SELECT id FROM queen.queues WHERE name = 'bench-pop') AND p.name = 'p' || :client_id
       FOR UPDATE OF c SKIP LOCKED) x ON true \gset
\if :seq >= 0
UPDATE queen.cursors SET next_seq = :seq::bigint + 1 WHERE partition_id = :pid AND consumer_group = '__QUEUE_MODE__';
\endif
COMMIT;
