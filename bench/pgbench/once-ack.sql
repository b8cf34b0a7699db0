-- pop, then once + ack in one transaction: the SQL twin of a pop plus
-- POST /api/v1/transaction {operations:[ack], kv:[putIfAbsent required]}.
SELECT r::jsonb -> 'messages' -> 0 ->> 'transactionId' AS tx, r::jsonb ->> 'partitionId' AS pid,
       r::jsonb ->> 'leaseId' AS lease
  FROM queen.pop('bench-pop', 'p' || :client_id, NULL, 1, 1, NULL, false, NULL, NULL) r \gset
SELECT queen.transaction(json_build_object(
  'operations', json_build_array(json_build_object('type', 'ack', 'transactionId', :tx::text, 'partitionId', :pid::text,
                                                   'leaseId', :lease::text, 'status', 'completed')),
  'requiredLeases', json_build_array(:lease::text),
  'kv', json_build_array(json_build_object('op', 'putIfAbsent', 'ns', 'once', 'key', 'charge:' || :tx::text,
                                           'value', true, 'ttlSeconds', 86400, 'required', true))),
  'bench', 4194304);
