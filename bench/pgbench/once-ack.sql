-- pop, then once + ack in one transaction: the SQL twin of a pop plus
-- POST /api/v1/transaction {operations:[ack], kv:[putIfAbsent required]},
-- with the bundle as the typed arrays the engine sends (statements/transaction.sql).
SELECT r.transaction_ids[1] AS tx, r.lane_ids[1] AS pid, r.lease_id AS lease
  FROM queen.pop('bench-pop', 'p' || :client_id, NULL, 1, 1, NULL, false, NULL, NULL) r \gset
SELECT queen.transaction_rows(gen_random_uuid()::text, lower(:lease::text), 4194304, 1,
  '{}'::integer[], '{}'::text[], '{}'::text[], '{}'::text[], '{}'::text[], '{}'::text[],
  ARRAY[0], ARRAY[:tx::text], ARRAY[:pid::uuid], ARRAY['completed'], ARRAY[NULL::text], ARRAY[:lease::text],
  ARRAY['__QUEUE_MODE__'],
  ARRAY['putIfAbsent'], ARRAY['once'], ARRAY['charge:' || :tx::text], ARRAY['true'::jsonb], ARRAY[86400::bigint],
  ARRAY[NULL::boolean], ARRAY[NULL::bigint], ARRAY[true], ARRAY[NULL::numeric], ARRAY[NULL::numeric],
  ARRAY[NULL::numeric], ARRAY[NULL::jsonb], ARRAY[NULL::text], ARRAY[NULL::text], ARRAY[NULL::integer],
  ARRAY[NULL::boolean],
  '{}'::text[], '{}'::text[], '{}'::text[], '{}'::text[], '{}'::text[], '{}'::bigint[], '{}'::text[])::text;
