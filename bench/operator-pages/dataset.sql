-- The operator-pages data set: what a large deployment's dashboard reads.
-- Run on a migrated, empty database (`queen bench --operator-pages` does).
--
--   * queue `scale` with 100,000 partitions of 5 messages each (500,000
--     messages): queue mode has consumed 2 of each, group `audit` 3; every
--     10th queue-mode cursor holds a live lease over the next 2;
--   * 20 small queues of 10 partitions and 10 messages each;
--   * 10,000 dead letters on `scale`;
--   * 1,000,000 KV keys: 900,000 in `big`, 1,000 in each of 99 others, plus
--     100 held locks in `queen-locks`; every 20th key of `big` has expired
--     (not yet swept);
--   * 10,000 timers due tomorrow (so the sweeper leaves them).
--
-- Rows go straight into the tables as the broker would have left them; the
-- triggers that keep ready_lanes fill it for the cursors.

INSERT INTO queen.queues (name, namespace, task) VALUES ('scale', 'ops', 'bench');
INSERT INTO queen.queues (name, namespace) SELECT 'small-' || i, 'ops' FROM generate_series(1, 20) i;

INSERT INTO queen.consumer_groups (queue_name, name, subscription_mode)
VALUES ('scale', 'audit', 'all');

-- Partitions: 100,000 on `scale`, 10 on each small queue.
-- Pushes over the last two hours: partition i's messages a second apart
-- from its own start, and its last push when its last message came.
INSERT INTO queen.partitions (queue_id, name, next_seq, last_push_at, created_at)
SELECT q.id, 'p' || lpad(i::text, 6, '0'), 5, now() - interval '2 hours' + make_interval(secs => i * 0.07 + 4),
       now() - interval '2 hours' + make_interval(secs => i * 0.07)
  FROM queen.queues q, generate_series(1, 100000) i WHERE q.name = 'scale';
INSERT INTO queen.partitions (queue_id, name, next_seq, last_push_at, created_at)
SELECT q.id, 'p' || i, 10, now() - interval '1 hour' + make_interval(secs => i + 9),
       now() - interval '1 hour' + make_interval(secs => i)
  FROM queen.queues q, generate_series(1, 10) i WHERE q.name LIKE 'small-%';

INSERT INTO queen.messages (partition_id, seq, id, transaction_id, payload, created_at)
SELECT p.id, s, gen_random_uuid(), p.name || '-' || s, json_build_object('n', s, 'body', 'operator page row'),
       p.created_at + make_interval(secs => s)
  FROM queen.partitions p, generate_series(0, p.next_seq - 1) s;

-- Cursors: queue mode on every partition, `audit` on `scale`.
INSERT INTO queen.cursors (partition_id, consumer_group, queue_id, next_seq, lease_id, lease_expires_at,
                           batch_end, last_delivered_at)
SELECT p.id, '__QUEUE_MODE__', p.queue_id, 2,
       CASE WHEN right(p.name, 1) = '0' THEN gen_random_uuid() END,
       CASE WHEN right(p.name, 1) = '0' THEN now() + interval '1 hour' END,
       CASE WHEN right(p.name, 1) = '0' THEN 4 END,
       now() - interval '10 minutes'
  FROM queen.partitions p;
INSERT INTO queen.cursors (partition_id, consumer_group, queue_id, next_seq, last_delivered_at)
SELECT p.id, 'audit', p.queue_id, 3, now() - interval '5 minutes'
  FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = 'scale';

INSERT INTO queen.dead_letters (queue_id, partition_id, consumer_group, seq, message_id, transaction_id,
                                payload, error_message, retry_count, created_at)
SELECT p.queue_id, p.id, '__QUEUE_MODE__', 0, gen_random_uuid(), 'dead-' || p.name,
       '{"dead": true}', 'operator-pages data set', 3, now() - interval '2 hours'
  FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id
 WHERE q.name = 'scale' AND right(p.name, 1) = '7';

INSERT INTO queen.kv (ns, key, value, version, expires_at)
SELECT 'big', 'user:' || lpad(i::text, 7, '0'), json_build_object('n', i)::jsonb, nextval('queen.kv_version_seq'),
       CASE WHEN i % 20 = 0 THEN now() - interval '1 minute' END
  FROM generate_series(1, 900000) i;
INSERT INTO queen.kv (ns, key, value, version)
SELECT 'ns-' || lpad(n::text, 2, '0'), 'k' || lpad(i::text, 4, '0'), '1'::jsonb, nextval('queen.kv_version_seq')
  FROM generate_series(1, 99) n, generate_series(1, 1000) i;
INSERT INTO queen.kv (ns, key, value, version, expires_at)
SELECT 'queen-locks', 'lock-' || i, json_build_object('holder', 'bench')::jsonb, nextval('queen.kv_version_seq'),
       now() + interval '1 hour'
  FROM generate_series(1, 100) i;

INSERT INTO queen.timers (queue_name, timer_key, partition_name, payload, txn, message_id, deliver_at)
SELECT 'small-1', 't' || i, 'p1', '{"timer": true}', 'timer-' || i, gen_random_uuid(),
       now() + interval '1 day'
  FROM generate_series(1, 10000) i;

ANALYZE;
