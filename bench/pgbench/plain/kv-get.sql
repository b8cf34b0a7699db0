-- plain KV get of one of :keys keys in namespace :ns (-D ns=bench -D
-- keys=10000, or ns=vs keys=1000 for the value-size series): the
-- primary-key read with the expiry test (an expired row does not exist).
\set k random(1, :keys)
SELECT value, version, expires_at, updated_at FROM queen.kv
 WHERE ns = :ns AND key = 'k:' || :k AND (expires_at IS NULL OR expires_at > now());
