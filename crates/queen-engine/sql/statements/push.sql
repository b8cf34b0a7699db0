-- Engine::push_items and the push batcher: typed arrays, one element per checked item;
-- $6 numbers each item's request within a batch (NULL: one request); $8 and $9 are
-- the transaction ids and message-id tails the engine drew (push.rs). The answer:
-- ids and verdicts, from which the engine writes the 201 body.
SELECT ids, verdicts, queued
  FROM queen.push_rows($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::integer[],
                       p_subs => $7::text[], p_new_txids => $8::text[], p_tails => $9::bigint[])
