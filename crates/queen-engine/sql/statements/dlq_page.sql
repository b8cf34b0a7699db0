-- The dashboard's dead letters (dlq.rs): the total, one keyset page of dead
-- letters in page order (one row of NULLs when the page is empty), and where
-- the next page starts.
SELECT l.total, r.dlq_id, r.message_id, r.payload, r.error_message, r.transaction_id, r.trace_id,
       r.partition_id, r.producer_sub, r.queue, r.partition, r.consumer_group, r.retry_count, r.created_at,
       r.failed_at, l.next_before
  FROM queen.dlq_page($1, $2, $3) l
  LEFT JOIN LATERAL queen.dead_letter_rows(l.ids) r ON true
 ORDER BY r.ord
