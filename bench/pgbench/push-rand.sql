-- push of 1 message to a random one of :parts existing partitions (-D
-- parts=1000|100000) of queue bench-spread: the SQL twin of POST
-- /api/v1/push with one item (push-1-rand1k, push-1-rand100k), as the engine
-- sends it (statements/push.sql, the lean answer); the database draws the
-- transaction id and the message id, as in push-1.sql.
\set p random(0, :parts - 1)
SELECT ids, verdicts, queued
  FROM queen.push_rows(ARRAY['bench-spread'], ARRAY['p' || :p], ARRAY[NULL::text], ARRAY[NULL::text],
                       ARRAY['{"n":1}'], NULL);
