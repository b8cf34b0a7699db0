-- The broker registry's heartbeat: this broker's row upserted, the rows of
-- brokers silent for longer than $7 seconds forgotten, and the number of
-- other live brokers answered (none: this broker's pushes announce nothing).
WITH forgotten AS (
  DELETE FROM queen.brokers WHERE heartbeat_at < now() - make_interval(secs => $7) AND id <> $1
),
mine AS (
  INSERT INTO queen.brokers (id, url, hostname, pid, version, started_at, heartbeat_at, figures)
  VALUES ($1, $2, $3, $4, $5, $6, now(), $8::text::jsonb)
  ON CONFLICT (id) DO UPDATE SET url = EXCLUDED.url, heartbeat_at = now(), figures = EXCLUDED.figures
)
SELECT count(*) FROM queen.brokers WHERE id <> $1 AND heartbeat_at >= now() - make_interval(secs => $7)
