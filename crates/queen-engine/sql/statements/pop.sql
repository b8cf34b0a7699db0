-- Engine::pop of one queue (a lone request, or a batch member run alone):
-- queue, partition, group, batch, partitions, leaseSeconds, autoAck,
-- subscription mode and start, this broker's encryption key id. One row of
-- queen.popped, all NULL when nothing was delivered.
SELECT p.queue, p.lease_id, p.consumer_group, p.lane_ids, p.lane_names, p.lane_sizes, p.ids, p.transaction_ids,
       p.trace_ids, p.payloads, p.producer_subs, p.created_ats
  FROM queen.pop_api($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) p
