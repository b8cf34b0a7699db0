-- POST /streams/v1/state/get: $5 is a JSON number's text, compared as numeric.
SELECT queen.stream_state_get($1::uuid, $2::uuid, $3::text[], $4::text, $5::text::numeric)::text
