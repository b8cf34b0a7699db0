-- POST /api/v1/resources/kv/list (kv/browse.rs list): namespace, prefix,
-- cursor, limit, byte ceiling. One row per key of the page in key order,
-- each with whether more follow.
SELECT l.key, l.value, l.version, l.expires_at, l.updated_at, l.expired, l.more
  FROM queen.kv_list($1, $2, $3, $4, $5) l
