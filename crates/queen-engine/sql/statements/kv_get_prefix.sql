-- KV getPrefix: ns, prefix, after, limit, keysOnly, byte budget.
SELECT queen.kv_get_prefix($1, $2, $3, $4, $5, $6)::text
