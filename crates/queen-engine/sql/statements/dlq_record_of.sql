-- The newest dead-letter record of a message (partition $1, transaction id $2), for a
-- retry whose destination turned encryption on (engine/dlq.rs).
SELECT id FROM queen.dead_letters WHERE partition_id = $1 AND transaction_id = $2 ORDER BY id DESC LIMIT 1
