-- plain end-to-end producer: one push of :batch messages on queue bench-e2e
-- of :parts existing partitions (-D batch=<N> -D parts=<P> -D lanes=<L>
-- -D own=0|1): item i goes to p<(a + b*(i mod L)) mod P>, so L = 1 puts the
-- whole push in one partition (p<client_id> with own=1, else a random one)
-- and L = 100 spreads it over 100 distinct ones (the draw of
-- ../push-spread.sql). Lock the partitions in id order, take each one's
-- offsets under that lock (held to commit), mark the lane ready for the
-- groups that had drained it (as our push does) and insert the messages,
-- in one statement. Payloads are 256 bytes of JSON that carry their insert
-- time in microseconds (t). Answers the ids, as our 201 does.
\set a case when :own = 1 then :client_id % :parts else random(0, :parts - 1) end
\set k random(0, greatest(:parts * 4 / 10, 1) - 1)
\set b (:k / 4) * 10 + case when :k % 4 = 0 then 1 when :k % 4 = 1 then 3 when :k % 4 = 2 then 7 else 9 end
WITH items AS MATERIALIZED (
  SELECT 'p' || ((:a + :b * (i % :lanes)::bigint) % :parts) AS name, count(*) AS n
    FROM generate_series(0, :batch::int - 1) i
   GROUP BY 1),
locked AS MATERIALIZED (
  SELECT p.id, i.n
    FROM queen.partitions p JOIN items i ON i.name = p.name
   WHERE p.queue_id = (SELECT id FROM queen.queues WHERE name = 'bench-e2e')
   ORDER BY p.id
     FOR NO KEY UPDATE OF p),
bump AS (
  UPDATE queen.partitions p SET next_seq = p.next_seq + l.n, last_push_at = now()
    FROM locked l
   WHERE p.id = l.id
  RETURNING p.id, p.next_seq - l.n AS first, l.n),
ready AS (
  INSERT INTO queen.ready_lanes (partition_id, consumer_group, queue_id, delivered_at)
  SELECT c.partition_id, c.consumer_group, c.queue_id, c.last_delivered_at
    FROM bump b JOIN queen.cursors c ON c.partition_id = b.id AND c.next_seq >= b.first
  ON CONFLICT DO NOTHING)
INSERT INTO queen.messages (partition_id, seq, id, transaction_id, payload)
SELECT b.id, s, queen.uuid_v7(), queen.uuid_v7()::text,
       json_build_object('t', (extract(epoch FROM clock_timestamp()) * 1000000)::bigint, 'pad', repeat('x', 225))
  FROM bump b, generate_series(b.first, b.first + b.n - 1) s
RETURNING id, transaction_id;
