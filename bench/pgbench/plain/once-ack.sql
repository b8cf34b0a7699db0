-- plain pop, then ack + once marker in one transaction: claim and read as
-- pop-ack.sql, then in one statement commit the offset and insert the
-- marker once:charge:<transactionId> (TTL 86400 s); a live marker means
-- "done before", and the transaction rolls back (the `required` of ours).
-- An expired marker counts as absent, as in ours (the DO UPDATE ... WHERE).
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
WITH ack AS (
  UPDATE queen.cursors SET next_seq = :seq::bigint + 1 WHERE partition_id = :pid AND consumer_group = '__QUEUE_MODE__'),
marker AS (
  INSERT INTO queen.kv AS t (ns, key, value, version, expires_at)
  VALUES ('once', 'charge:' || :tx, 'true', nextval('queen.kv_version_seq'), now() + interval '86400 seconds')
  ON CONFLICT (ns, key) DO UPDATE
     SET value = excluded.value, version = excluded.version, expires_at = excluded.expires_at, updated_at = now()
   WHERE t.expires_at <= now()
  RETURNING 1)
SELECT count(*) AS fresh FROM marker \gset
\if :fresh = 0
ROLLBACK;
\else
COMMIT;
\endif
\else
COMMIT;
\endif
