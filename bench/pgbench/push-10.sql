-- push, batch 10: the SQL twin of POST /api/v1/push with 10 items.
SELECT queen.push((SELECT json_agg(json_build_object('queue', 'bench', 'partition', 'p' || :client_id,
                                                    'payload', json_build_object('n', 1)))
                     FROM generate_series(1, 10)));
