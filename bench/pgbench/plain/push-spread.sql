-- plain push of :batch messages over the :parts existing partitions of
-- queue bench-spread (-D batch=<N> -D parts=<P>), item i on
-- p<(a + b*i) mod P> as in ../push-spread.sql, in one statement: lock the
-- partitions the items go to in id order (two pushes that lock several
-- partitions in different orders deadlock; the order is what our push
-- uses), take each one's offsets (next_seq + its items) under that lock,
-- held to commit, and insert the messages with them. Answers the ids.
\set a random(0, :parts - 1)
\set k random(0, greatest(:parts * 4 / 10, 1) - 1)
\set b (:k / 4) * 10 + case when :k % 4 = 0 then 1 when :k % 4 = 1 then 3 when :k % 4 = 2 then 7 else 9 end
WITH items AS MATERIALIZED (
  SELECT 'p' || ((:a + :b * i::bigint) % :parts) AS name, count(*) AS n
    FROM generate_series(0, :batch::int - 1) i
   GROUP BY 1),
locked AS MATERIALIZED (
  SELECT p.id, i.n
    FROM queen.partitions p JOIN items i ON i.name = p.name
   WHERE p.queue_id = (SELECT id FROM queen.queues WHERE name = 'bench-spread')
   ORDER BY p.id
     FOR NO KEY UPDATE OF p),
bump AS (
  UPDATE queen.partitions p SET next_seq = p.next_seq + l.n, last_push_at = now()
    FROM locked l
   WHERE p.id = l.id
  RETURNING p.id, p.next_seq - l.n AS first, l.n)
INSERT INTO queen.messages (partition_id, seq, id, transaction_id, payload)
SELECT b.id, s, queen.uuid_v7(), queen.uuid_v7()::text, '{"n": 1}'
  FROM bump b, generate_series(b.first, b.first + b.n - 1) s
RETURNING id, transaction_id;
