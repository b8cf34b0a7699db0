-- POST /streams/v1/state/get: $5 is a JSON number's text, compared as numeric.
-- One row per state row, in key order.
SELECT s.key, s.value, s.updated_at
  FROM queen.stream_state_get($1::uuid, $2::uuid, $3::text[], $4::text, $5::text::numeric) s
