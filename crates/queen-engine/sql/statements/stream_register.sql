-- POST /streams/v1/queries (queen.stream_register): the query's id, whether
-- its name was new, whether its state was reset.
SELECT r.registered_id, r.fresh, r.state_reset
  FROM queen.stream_register($1::text, $2::text, $3::text, $4::text, $5::boolean) r
