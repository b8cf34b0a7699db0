-- plain push of 1 message into a new partition (a random 64-bit name) of
-- queue bench-create, in one statement: insert the partition with its
-- offset already taken (next_seq 1; the new row is this transaction's until
-- commit, so no other push can take an offset of it), a cursor at 0 for
-- each group registered on the queue, and the message at offset 0. Left
-- out: our lock against a group registering at the same moment (no group
-- registers during the run).
\set c random(1, 9000000000000000000)
WITH p AS (
  INSERT INTO queen.partitions (queue_id, name, next_seq, last_push_at)
  SELECT q.id, 'c' || :c, 1, now() FROM queen.queues q WHERE q.name = 'bench-create'
  RETURNING id, queue_id),
c AS (
  INSERT INTO queen.cursors (partition_id, consumer_group, queue_id, next_seq)
  SELECT p.id, g.name, p.queue_id, 0 FROM p JOIN queen.consumer_groups g ON g.queue_name = 'bench-create')
INSERT INTO queen.messages (partition_id, seq, id, transaction_id, payload)
SELECT p.id, 0, queen.uuid_v7(), queen.uuid_v7()::text, '{"n": 1}'
  FROM p
RETURNING id, transaction_id;
