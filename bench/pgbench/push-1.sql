-- push, batch 1: the SQL twin of POST /api/v1/push with one item, as the
-- engine sends it (statements/push.sql: typed arrays, one element per item).
SELECT result::text, queued
  FROM queen.push_rows(ARRAY['bench'], ARRAY['p' || :client_id], ARRAY[NULL::text], ARRAY[NULL::text],
                       ARRAY['{"n":1}'], NULL);
