-- plain push of :batch messages (-D batch=1|10|100) on this client's
-- partition of queue bench: take :batch offsets from the partition row
-- (the UPDATE holds its row lock to commit, so offsets commit in order, as
-- ours) and insert the messages with them, in one statement. Answers the
-- ids, as our 201 does. The partitions exist (created once, not measured).
-- Marks the lane ready for groups that had drained it, as ours does.
-- No ':' right before a word inside literals (pgbench reads ':word' as a
-- variable even there): hence the space in '{"n": 1}'.
WITH p AS (
  UPDATE queen.partitions SET next_seq = next_seq + :batch, last_push_at = now()
   WHERE queue_id = (SELECT id FROM queen.queues WHERE name = 'bench') AND name = 'p' || :client_id
  RETURNING id, next_seq - :batch AS first),
-- The lane turns ready for each group that had drained it, as our push marks it.
ready AS (
  INSERT INTO queen.ready_lanes (partition_id, consumer_group, queue_id, delivered_at)
  SELECT c.partition_id, c.consumer_group, c.queue_id, c.last_delivered_at
    FROM p JOIN queen.cursors c ON c.partition_id = p.id AND c.next_seq >= p.first
  ON CONFLICT DO NOTHING)
INSERT INTO queen.messages (partition_id, seq, id, transaction_id, payload)
SELECT p.id, s, queen.uuid_v7(), queen.uuid_v7()::text, '{"n": 1}'
  FROM p, generate_series(p.first, p.first + :batch - 1) s
RETURNING id, transaction_id;
