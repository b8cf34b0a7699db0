-- plain push of 1 message to a random one of :parts existing partitions
-- (-D parts=1000|100000) of queue bench-spread: as push.sql with batch 1,
-- on a drawn partition instead of the client's own. The UPDATE takes the
-- offset under the partition row's lock, held to commit.
\set p random(0, :parts - 1)
WITH p AS (
  UPDATE queen.partitions SET next_seq = next_seq + 1, last_push_at = now()
   WHERE queue_id = (SELECT id FROM queen.queues WHERE name = 'bench-spread') AND name = 'p' || :p
  RETURNING id, next_seq - 1 AS seq)
INSERT INTO queen.messages (partition_id, seq, id, transaction_id, payload)
SELECT p.id, p.seq, queen.uuid_v7(), queen.uuid_v7()::text, '{"n": 1}'
  FROM p
RETURNING id, transaction_id;
