-- push of :batch messages over the :parts existing partitions of queue
-- bench-spread (-D batch=<N> -D parts=<P>): the SQL twin of POST
-- /api/v1/push with N items (push-100-spread100, push-1000-spread1000, the
-- push-curve series), as the engine sends them (statements/push.sql, the
-- lean answer). Item i goes to p<(a + b*i) mod P>: a random start a and a
-- random stride b prime to P (the k-th number ending in 1, 3, 7 or 9; P has
-- no prime factors but 2 and 5), so min(N, P) distinct partitions, N/P items
-- each; our HTTP side draws the same way (workload.rs, Spread).
\set a random(0, :parts - 1)
\set k random(0, greatest(:parts * 4 / 10, 1) - 1)
\set b (:k / 4) * 10 + case when :k % 4 = 0 then 1 when :k % 4 = 1 then 3 when :k % 4 = 2 then 7 else 9 end
SELECT r.ids, r.verdicts, r.queued
  FROM (SELECT array_agg('p' || ((:a + :b * i::bigint) % :parts) ORDER BY i) AS parts
          FROM generate_series(0, :batch::int - 1) i) s,
       LATERAL queen.push_rows(array_fill('bench-spread'::text, ARRAY[:batch::int]), s.parts,
                               array_fill(NULL::text, ARRAY[:batch::int]), array_fill(NULL::text, ARRAY[:batch::int]),
                               array_fill('{"n":1}'::text, ARRAY[:batch::int]), NULL) r;
