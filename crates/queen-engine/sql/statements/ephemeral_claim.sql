-- Engine::ephemeral_owner: claim (or take over, or only look at) an ephemeral queue.
SELECT mine, owner_url, options::text, found, owner_epoch
  FROM queen.ephemeral_claim($1::text, $2::uuid, $3::text, $4::integer, $5::boolean)
