-- Engine pops of a batch (pop.rs): pop.sql's parameters as arrays, one
-- element per request, and the key id; one row of queen.popped per request,
-- in the arrays' order.
SELECT p.queue, p.lease_id, p.consumer_group, p.lane_ids, p.lane_names, p.lane_sizes, p.ids, p.transaction_ids,
       p.trace_ids, p.payloads, p.producer_subs, p.created_ats
  FROM queen.pop_requests($1::text[], $2::text[], $3::text[], $4::integer[], $5::integer[], $6::integer[],
                          $7::boolean[], $8::text[], $9::text[], $10::text) p
