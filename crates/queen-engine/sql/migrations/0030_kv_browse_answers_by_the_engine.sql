-- The KV browser's namespace counts and key pages answer rows; the engine
-- writes both answers (kv/browse.rs).
DROP FUNCTION IF EXISTS queen.kv_namespace_counts();
DROP FUNCTION IF EXISTS queen.kv_list(text, text, text, integer, bigint);
