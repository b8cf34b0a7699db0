-- The last 60 minutes (the current one last), each summed over every
-- broker; a minute without a row is 0.
SELECT queen.iso(m.minute) AS minute,
       coalesce(sum(b.pushed), 0)::bigint AS pushed,
       coalesce(sum(b.popped), 0)::bigint AS popped,
       coalesce(sum(b.acked), 0)::bigint AS acked
  FROM generate_series(date_trunc('minute', now()) - interval '59 minutes',
                       date_trunc('minute', now()), interval '1 minute') AS m(minute)
  LEFT JOIN queen.broker_minutes b ON b.minute = m.minute
 GROUP BY m.minute
 ORDER BY m.minute
