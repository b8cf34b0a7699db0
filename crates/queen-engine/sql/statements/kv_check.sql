-- KV check: ns, key, expect (0 = must be absent).
SELECT queen.kv_check($1, $2, $3)::text
