-- The shared commit.

-- POST /api/v1/transaction: pushes, acks and KV operations in one commit.
-- Results live in one flat index space: one slot per pushed item and per ack,
-- in `operations` order, then one per `kv` op.
-- Lock order: partitions of the pushes (by id), then cursors of the acks (by
-- partition id), then KV keys (in byte order), so overlapping bundles never
-- deadlock. Any refusal raises QN200 and the whole bundle rolls back.
DROP FUNCTION IF EXISTS queen.transaction(json, text);
CREATE OR REPLACE FUNCTION queen.transaction(p_body json, p_tx_id text, p_max_read_bytes bigint)
RETURNS json
LANGUAGE plpgsql AS $$
DECLARE
  v_ops json;
  v_push_items json[] := '{}';
  v_push_slots integer[] := '{}';
  v_ack_items json[] := '{}';
  v_ack_slots integer[] := '{}';
  v_leases text[] := '{}';
  v_lent text;
  v_slot integer := 0;
  op record;
  v_item json;
  v_push json := '[]';
  v_ack json := '[]';
  v_results jsonb[];
  v_kv json := '[]';
  v_has_kv boolean;
  r record;
BEGIN
  IF json_typeof(p_body) IS DISTINCT FROM 'object' THEN
    PERFORM queen.bad_request('body', 'must be a JSON object');
  END IF;
  v_ops := p_body -> 'operations';
  IF json_typeof(v_ops) IS DISTINCT FROM 'array' THEN
    PERFORM queen.bad_request('operations', 'is required and must be an array');
  END IF;
  IF json_typeof(p_body -> 'requiredLeases') NOT IN ('array', 'null') THEN
    PERFORM queen.bad_request('requiredLeases', 'must be an array of strings');
  END IF;

  FOR op IN SELECT e.item, e.ord - 1 AS idx FROM json_array_elements(v_ops) WITH ORDINALITY e(item, ord) LOOP
    IF json_typeof(op.item) <> 'object' THEN
      PERFORM queen.bad_request('operations[' || op.idx || ']', 'must be an object');
    END IF;
    CASE op.item ->> 'type'
      WHEN 'push' THEN
        IF json_typeof(op.item -> 'items') IS DISTINCT FROM 'array' THEN
          PERFORM queen.bad_request('operations[' || op.idx || '].items', 'is required and must be an array');
        END IF;
        FOR v_item IN SELECT json_array_elements(op.item -> 'items') LOOP
          v_push_items := v_push_items || v_item;
          v_push_slots := v_push_slots || v_slot;
          v_slot := v_slot + 1;
        END LOOP;
      WHEN 'ack' THEN
        v_ack_items := v_ack_items || op.item;
        v_ack_slots := v_ack_slots || v_slot;
        v_slot := v_slot + 1;
        IF json_typeof(op.item -> 'leaseId') = 'string' AND op.item ->> 'leaseId' <> '' THEN
          v_leases := v_leases || lower(op.item ->> 'leaseId');
        END IF;
      ELSE
        PERFORM queen.bad_request('operations[' || op.idx || '].type', 'must be "push" or "ack"');
    END CASE;
  END LOOP;
  IF json_typeof(p_body -> 'kv') NOT IN ('array', 'null') THEN
    PERFORM queen.kv_reject('kv_bad_body', 'kv must be an array of kv operations');
  END IF;
  v_has_kv := coalesce(json_typeof(p_body -> 'kv') = 'array' AND json_array_length(p_body -> 'kv') > 0, false);
  IF v_slot = 0 AND NOT v_has_kv THEN
    PERFORM queen.bad_request('operations', 'Transaction has no operations to commit');
  END IF;

  -- requiredLeases lends its lease to lease-less acks only when the bundle
  -- names exactly one distinct lease.
  SELECT array_agg(DISTINCT l) INTO v_leases FROM (
    SELECT unnest(v_leases) AS l
    UNION ALL
    SELECT lower(x) FROM json_array_elements_text(coalesce(p_body -> 'requiredLeases', '[]')) x WHERE x <> ''
  ) s;
  IF coalesce(array_length(v_leases, 1), 0) = 1 THEN
    v_lent := v_leases[1];
  END IF;

  IF array_length(v_push_items, 1) > 0 THEN
    -- queen.push_rows refuses while push is paused.
    v_push := queen.push(array_to_json(v_push_items));
    SELECT * INTO r FROM json_array_elements(v_push) e(x) WHERE x ->> 'status' <> 'queued' LIMIT 1;
    IF r.x IS NOT NULL THEN
      RAISE EXCEPTION USING ERRCODE = 'QN200', MESSAGE = json_build_object(
        'transactionId', p_tx_id, 'success', false, 'reason', 'duplicate', 'results', '[]'::json,
        'error', CASE WHEN r.x ->> 'status' = 'duplicate'
          THEN 'QDUP item ' || (r.x ->> 'index') || ' (transactionId ' || (r.x ->> 'transaction_id')
               || ') is a duplicate inside the dedup window; the transaction rolled back'
          ELSE coalesce(r.x ->> 'error', 'push failed') || '; the transaction rolled back' END)::text;
    END IF;
  END IF;
  IF array_length(v_ack_items, 1) > 0 THEN
    v_ack := queen.ack(array_to_json(v_ack_items), NULL, p_tx_id, v_lent);
  END IF;

  IF v_has_kv THEN
    v_kv := queen.kv_batch(p_body -> 'kv', jsonb_build_object('tx', true, 'txId', p_tx_id,
      'offset', v_slot, 'maxReadBytes', p_max_read_bytes));
  END IF;

  v_results := array_fill(NULL::jsonb, ARRAY[greatest(v_slot, 1)]);
  FOR r IN SELECT e.x, e.n FROM json_array_elements(v_push) WITH ORDINALITY e(x, n) LOOP
    v_results[v_push_slots[r.n] + 1] := jsonb_build_object('index', v_push_slots[r.n], 'type', 'push',
      'success', true, 'transactionId', r.x ->> 'transaction_id', 'messageId', r.x ->> 'message_id',
      'queueName', r.x ->> 'queueName');
  END LOOP;
  FOR r IN SELECT e.x, e.n FROM json_array_elements(v_ack) WITH ORDINALITY e(x, n) LOOP
    v_results[v_ack_slots[r.n] + 1] := jsonb_build_object('index', v_ack_slots[r.n], 'type', 'ack',
      'success', true, 'transactionId', r.x ->> 'transactionId', 'error', NULL,
      'dlq', (r.x ->> 'dlq')::boolean);
  END LOOP;

  RETURN json_build_object('transactionId', p_tx_id, 'success', true,
    'results', coalesce((SELECT jsonb_agg(x ORDER BY n) FROM unnest(v_results[1:v_slot]) WITH ORDINALITY u(x, n)), '[]'::jsonb)
               || v_kv::jsonb);
END $$;
