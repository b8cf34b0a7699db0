-- The live brokers (heard from within $1 seconds), oldest first, with their figures.
SELECT coalesce(json_agg(json_build_object(
         'id', b.id, 'url', b.url, 'hostname', b.hostname, 'pid', b.pid, 'version', b.version,
         'startedAt', queen.iso(b.started_at), 'lastSeenAt', queen.iso(b.heartbeat_at),
         'secondsSinceHeartbeat', round(extract(epoch FROM now() - b.heartbeat_at)::numeric, 1),
         'figures', b.figures) ORDER BY b.started_at, b.id), '[]'::json)::text
  FROM queen.brokers b
 WHERE b.heartbeat_at >= now() - make_interval(secs => $1)
