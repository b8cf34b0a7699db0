-- push, batch 1: the SQL twin of POST /api/v1/push with one item.
SELECT queen.push(('[{"queue":"bench","partition":"p' || :client_id || '","payload":{"n":1}}]')::json);
