-- GET /api/v1/dlq (dlq.rs): the filter's total and one page of dead letters,
-- one row per dead letter in page order (one row of NULLs when the page is empty).
SELECT l.total, r.dlq_id, r.message_id, r.payload, r.error_message, r.transaction_id, r.trace_id,
       r.partition_id, r.producer_sub, r.queue, r.partition, r.consumer_group, r.retry_count, r.created_at,
       r.failed_at, NULL::bigint AS next_before
  FROM queen.dlq_list($1, $2, $3, $4, $5, $6, $7) l
  LEFT JOIN LATERAL queen.dead_letter_rows(l.ids) r ON true
 ORDER BY r.ord
