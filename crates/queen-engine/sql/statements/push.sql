-- Engine::push_items: typed arrays, one element per checked item.
SELECT result::text, queued FROM queen.push_rows($1::text[], $2::text[], $3::text[], $4::text[], $5::text[])
