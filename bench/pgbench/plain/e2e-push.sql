-- plain end-to-end producer: one push of :batch messages on queue bench-e2e
-- of :parts existing partitions (-D batch=<N> -D parts=<P> -D lanes=<L>
-- -D own=0|1): item i goes to p<(a + b*(i mod L)) mod P>, so L = 1 puts the
-- whole push in one partition (p<client_id> with own=1, else a random one)
-- and L = 100 spreads it over 100 distinct ones (the draw of
-- ../push-spread.sql). Each item carries a transactionId of its own (a
-- random UUID, as ours' producers send), and dedup is on: an item whose
-- transactionId the partition already holds within the hour (our default
-- dedup window) is not inserted and takes no offset. In one statement:
-- lock the partitions in id order, look each item up (a subquery per item
-- on messages_transaction_idx, as ours; a NOT EXISTS became a hash anti
-- join over every message under pgbench's generic plan, 4x slower at 200
-- partitions after 10 s), take each partition's offsets for its new
-- items under that lock (held to commit), mark its lanes ready and insert
-- the messages. Payloads are 256 bytes of JSON that carry their insert
-- time in microseconds (t). Answers the ids, as our 201 does.
--
-- Ready lanes: every cursor of a pushed partition gets its row (INSERT ...
-- ON CONFLICT DO NOTHING), not only the cursors that had drained the lane
-- as ours marks them. One statement reads the cursors in the snapshot it
-- took before it waited for the partition locks, so it cannot see a
-- consumer's cursor move that committed meanwhile together with the
-- removal of that lane's ready row (e2e-pop.sql removes the row of a lane
-- it drains); ours reads the cursors in a later statement, after the
-- locks. The conflict check sees the latest rows, so a removed row is put
-- back; an existing row costs an index probe.
\set a case when :own = 1 then :client_id % :parts else random(0, :parts - 1) end
\set k random(0, greatest(:parts * 4 / 10, 1) - 1)
\set b (:k / 4) * 10 + case when :k % 4 = 0 then 1 when :k % 4 = 1 then 3 when :k % 4 = 2 then 7 else 9 end
WITH items AS MATERIALIZED (
  SELECT i, 'p' || ((:a + :b * (i % :lanes)::bigint) % :parts) AS name, gen_random_uuid()::text AS txid
    FROM generate_series(0, :batch::int - 1) i),
locked AS MATERIALIZED (
  SELECT p.id, p.name
    FROM queen.partitions p
   WHERE p.queue_id = (SELECT id FROM queen.queues WHERE name = 'bench-e2e')
     AND p.name IN (SELECT name FROM items)
   ORDER BY p.id
     FOR NO KEY UPDATE OF p),
probed AS MATERIALIZED (
  SELECT l.id, it.i, it.txid,
         (SELECT 1 FROM queen.messages m
           WHERE m.partition_id = l.id AND m.transaction_id = it.txid
             AND m.created_at > now() - interval '3600 seconds'
           LIMIT 1) AS dup
    FROM items it JOIN locked l ON l.name = it.name),
fresh AS MATERIALIZED (
  SELECT id, txid, row_number() OVER (PARTITION BY id ORDER BY i) - 1 AS rn FROM probed WHERE dup IS NULL),
bump AS (
  UPDATE queen.partitions p SET next_seq = p.next_seq + f.n, last_push_at = now()
    FROM (SELECT id, count(*) AS n FROM fresh GROUP BY id) f
   WHERE p.id = f.id
  RETURNING p.id, p.next_seq - f.n AS first),
ready AS (
  INSERT INTO queen.ready_lanes (partition_id, consumer_group, queue_id, delivered_at)
  SELECT c.partition_id, c.consumer_group, c.queue_id, c.last_delivered_at
    FROM bump b JOIN queen.cursors c ON c.partition_id = b.id
  ON CONFLICT DO NOTHING)
INSERT INTO queen.messages (partition_id, seq, id, transaction_id, payload)
SELECT f.id, b.first + f.rn, queen.uuid_v7(), f.txid,
       json_build_object('t', (extract(epoch FROM clock_timestamp()) * 1000000)::bigint, 'pad', repeat('x', 225))
  FROM fresh f JOIN bump b ON b.id = f.id
RETURNING id, transaction_id;
