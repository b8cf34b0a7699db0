-- Engine::pop by namespace and/or task: namespace, task, then pop.sql's
-- parameters after the partition. One row of queen.popped, all NULL when
-- no queue delivered.
SELECT p.queue, p.lease_id, p.consumer_group, p.lane_ids, p.lane_names, p.lane_sizes, p.ids, p.transaction_ids,
       p.trace_ids, p.payloads, p.producer_subs, p.created_ats
  FROM queen.pop_matching($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) p
