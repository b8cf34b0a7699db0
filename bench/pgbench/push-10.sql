-- push, batch 10: the SQL twin of POST /api/v1/push with 10 items, as the
-- engine sends them (statements/push.sql: typed arrays, one element per item,
-- the lean answer). The engine also sends the transaction ids and message-id
-- tails it drew; pgbench cannot, so here the database draws them.
SELECT ids, verdicts, queued
  FROM queen.push_rows(array_fill('bench'::text, ARRAY[10]), array_fill('p' || :client_id, ARRAY[10]),
                       array_fill(NULL::text, ARRAY[10]), array_fill(NULL::text, ARRAY[10]),
                       array_fill('{"n":1}'::text, ARRAY[10]), NULL);
