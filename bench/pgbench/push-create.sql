-- push of 1 message into a partition that does not exist yet (a random
-- 64-bit name) of queue bench-create: the SQL twin of POST /api/v1/push
-- in the push-create series; queen.push_rows creates the partition and a
-- cursor for each registered group.
\set c random(1, 9000000000000000000)
SELECT ids, verdicts, queued
  FROM queen.push_rows(ARRAY['bench-create'], ARRAY['c' || :c], ARRAY[NULL::text], ARRAY[NULL::text],
                       ARRAY['{"n":1}'], NULL);
