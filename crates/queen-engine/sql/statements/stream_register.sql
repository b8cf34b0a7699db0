-- POST /streams/v1/queries (queen.stream_register).
SELECT queen.stream_register($1::text, $2::text, $3::text, $4::text, $5::boolean)::text
