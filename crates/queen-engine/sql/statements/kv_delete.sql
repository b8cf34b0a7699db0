-- KV delete: ns, key, expect.
SELECT queen.kv_delete($1, $2, $3)::text
