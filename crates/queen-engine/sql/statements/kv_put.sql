-- KV put / putIfAbsent (expect 0): ns, key, value, ttlSeconds (NULL with forever), forever, expect.
SELECT queen.kv_put($1, $2, $3::text::jsonb, $4, $5, $6)::text
