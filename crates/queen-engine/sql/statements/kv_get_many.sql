-- KV getMany: ns, keys, byte budget.
SELECT queen.kv_get_many($1, $2, $3)::text
