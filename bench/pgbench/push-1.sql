-- push, batch 1: the SQL twin of POST /api/v1/push with one item, as the
-- engine sends it (statements/push.sql: typed arrays, one element per item,
-- the lean answer). The engine also sends the transaction ids and message-id
-- tails it drew; pgbench cannot, so here the database draws them.
SELECT ids, verdicts, queued
  FROM queen.push_rows(ARRAY['bench'], ARRAY['p' || :client_id], ARRAY[NULL::text], ARRAY[NULL::text],
                       ARRAY['{"n":1}'], NULL);
