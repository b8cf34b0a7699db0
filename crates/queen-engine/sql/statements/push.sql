-- Engine::push_items and the push batcher: typed arrays, one element per checked item;
-- $6 numbers each item's request within a batch (NULL: one request).
SELECT result::text, queued
  FROM queen.push_rows($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::integer[], p_subs => $7::text[])
