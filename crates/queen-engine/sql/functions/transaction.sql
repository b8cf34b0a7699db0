-- The shared commit.

-- POST /api/v1/transaction: pushes, acks and KV operations in one commit.
-- The engine decodes and checks the bundle (crates/queen-engine/src/transaction.rs)
-- and passes it as typed arrays; this function applies it.
-- Results live in one flat index space: one slot per pushed item and per ack,
-- in `operations` order (p_push_slots, p_ack_slots), then one per `kv` op.
-- Timer ops follow the kv ops in the index space and are applied last.
-- Lock order: timer rows (by queue and key), then partitions of the pushes
-- (by id), then cursors of the acks (by partition id), then KV keys (in byte
-- order), so overlapping bundles, and a bundle and the timer sweeper (timer
-- rows, then the partitions it fires into), never deadlock. Any refusal raises
-- its facts, QN202 (queen_wire::TxRefusal: an ack refused, a push not
-- queued) or QN201 (a lost KV precondition), and the whole bundle rolls
-- back; the engine writes the refusal.
-- What a bundle did, for the engine to answer (crates/queen-engine/src/transaction.rs):
-- its pushes' message ids (aligned with its push items), whether each ack
-- dead-lettered its message (aligned with its acks; in strict mode every
-- ack was applied), its KV ops' outcomes
-- (kv_apply's) and its timer ops' outcome columns (timer_apply's; NULL
-- without timers). The engine
-- writes the transaction's answer and every element of it.
-- STABLE as json_build_object is, so that it is inlined.
CREATE OR REPLACE FUNCTION queen.tx_record(p_tx_id text, p_push_ids uuid[], p_ack_dlq boolean[], p_kv jsonb,
                                           p_timers jsonb) RETURNS json
LANGUAGE sql STABLE AS $$
  SELECT json_build_object('transactionId', p_tx_id, 'pushIds', coalesce(p_push_ids, '{}'),
                           'ackDlq', coalesce(p_ack_dlq, '{}'), 'kv', p_kv, 'timers', p_timers)
$$;

CREATE OR REPLACE FUNCTION queen.transaction_rows(
  p_tx_id text, p_lent_lease text, p_max_read_bytes bigint, p_slot_count integer,
  p_push_slots integer[], p_queues text[], p_parts text[], p_txids text[], p_traces text[], p_payloads text[],
  p_ack_slots integer[], p_ack_txids text[], p_ack_pids uuid[], p_ack_statuses text[], p_ack_errors text[],
  p_ack_leases text[], p_ack_groups text[],
  a_op text[], a_ns text[], a_key text[], a_value jsonb[], a_ttl bigint[], a_forever boolean[],
  a_expect bigint[], a_required boolean[], a_delta numeric[], a_min numeric[], a_max numeric[],
  a_keys jsonb[], a_prefix text[], a_after text[], a_limit integer[], a_keys_only boolean[],
  t_op text[], t_queue text[], t_key text[], t_part text[], t_payload text[], t_delay bigint[], t_txn text[],
  p_push_subs text[] DEFAULT NULL, t_sub text DEFAULT NULL)
RETURNS json
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $$
DECLARE
  v_ids uuid[];
  v_verdicts text;
  v_bad integer;
  v_ack_dlq boolean[] := '{}';
  v_kv json := '[]';
  v_timers jsonb;
  v_one jsonb;
BEGIN
  -- Timers first: the timer sweeper locks a due timer's row and then the
  -- partition it fires into, so a bundle takes timer rows before partitions
  -- too, and the two never deadlock (a refusal below rolls these back with
  -- the rest). Their results still follow the KV ops in the index space
  -- (the engine places them).
  IF coalesce(array_length(t_op, 1), 0) > 0 THEN
    SELECT jsonb_build_object('statuses', t.statuses, 'txns', t.txns, 'messageIds', t.message_ids,
                              'deliverAts', t.deliver_ats)
      INTO v_timers
      FROM queen.timer_apply(t_op, t_queue, t_key, t_part, t_payload, t_delay, t_txn, t_sub) t;
  END IF;

  IF coalesce(array_length(p_queues, 1), 0) > 0 THEN
    -- queen.push_rows refuses while push is paused. Every item carries
    -- its transaction id (the engine draws the missing ones).
    SELECT x.ids, x.verdicts INTO v_ids, v_verdicts
      FROM queen.push_rows(p_queues, p_parts, p_txids, p_traces, p_payloads, NULL, p_subs => p_push_subs) x;
    v_bad := queen.first_unqueued(v_verdicts);
    IF v_bad IS NOT NULL THEN
      RAISE EXCEPTION USING ERRCODE = 'QN202', MESSAGE = jsonb_build_object('pushRefused', jsonb_build_object(
        'index', v_bad - 1, 'duplicate', substr(v_verdicts, v_bad, 1) = 'd',
        'transactionId', p_txids[v_bad], 'queue', p_queues[v_bad]))::text;
    END IF;
  END IF;
  IF coalesce(array_length(p_ack_txids, 1), 0) > 0 THEN
    SELECT a.dlq INTO v_ack_dlq
      FROM queen.ack_rows(p_ack_txids, p_ack_pids, p_ack_statuses, p_ack_errors, p_ack_leases, p_ack_groups,
                          p_tx_id, p_lent_lease) a;
  END IF;

  -- One put or putIfAbsent (the `once` marker of an idempotent consumer)
  -- is applied here as queen.kv_apply would apply it, without that call:
  -- 7-9% of a pop + once + ack under pgbench at 16 clients.
  IF cardinality(a_op) = 1 AND a_op[1] IN ('put', 'putIfAbsent') THEN
    v_one := queen.kv_put(a_ns[1], a_key[1], a_value[1], a_ttl[1], a_forever[1],
                          CASE WHEN a_op[1] = 'put' THEN a_expect[1] ELSE 0 END);
    IF a_required[1] AND NOT (v_one ->> 'applied')::boolean THEN
      RAISE EXCEPTION USING ERRCODE = 'QN201', MESSAGE = queen.kv_lost(p_slot_count, a_key[1], v_one)::text;
    END IF;
    v_kv := json_build_array(v_one);
  ELSIF coalesce(array_length(a_op, 1), 0) > 0 THEN
    v_kv := queen.kv_apply(a_op, a_ns, a_key, a_value, a_ttl, a_forever, a_expect, a_required,
      a_delta, a_min, a_max, a_keys, a_prefix, a_after, a_limit, a_keys_only,
      jsonb_build_object('offset', p_slot_count, 'maxReadBytes', p_max_read_bytes));
  END IF;

  RETURN queen.tx_record(p_tx_id, v_ids, v_ack_dlq, v_kv::jsonb, v_timers);
END $$;

-- Several bundles without pushes or timers (acks and KV ops: the once +
-- ack of an idempotent consumer) in one statement and one commit
-- (batch.rs). Each bundle is decided before it is applied, in arrival
-- order, so it sees the writes of the bundles before it as serial bundles
-- would: its acks' verdicts (queen.ack_verdicts, strict) and, for a bundle
-- with one required put or putIfAbsent (the `once` marker), whether that
-- write would apply (queen.kv_put_verdict). A refused bundle writes
-- nothing and answers its refusal (refused[i]); the others are applied by
-- transaction_rows and commit together. Only a bundle whose refusal cannot
-- be decided ahead (several KV ops with a required one) can still raise:
-- then the statement rolls back and the engine runs each bundle alone.
-- Every cursor of the batch, then every KV key it writes, is locked first,
-- in the global order (cursors by (partition, group), keys in byte order),
-- so two batches never deadlock although their bundles interleave.
-- Per request: its transaction id, lent lease and slot count, and how
-- many of the flat acks and KV ops are its own (in request order).
-- Answers one transaction body per request.
CREATE OR REPLACE FUNCTION queen.transaction_batch(
  p_tx_ids text[], p_lent_leases text[], p_max_read_bytes bigint, p_slot_counts integer[],
  p_ack_counts integer[], p_kv_counts integer[],
  p_ack_slots integer[], p_ack_txids text[], p_ack_pids uuid[], p_ack_statuses text[], p_ack_errors text[],
  p_ack_leases text[], p_ack_groups text[],
  a_op text[], a_ns text[], a_key text[], a_value jsonb[], a_ttl bigint[], a_forever boolean[],
  a_expect bigint[], a_required boolean[], a_delta numeric[], a_min numeric[], a_max numeric[],
  a_keys jsonb[], a_prefix text[], a_after text[], a_limit integer[], a_keys_only boolean[],
  OUT answers text[], OUT refused boolean[])
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $$
DECLARE
  a integer := 1;
  b integer;
  k integer := 1;
  l integer;
  v_verdicts text[];
  v_refusal text;
  v_refused jsonb;
  v_kv jsonb;
BEGIN
  answers := '{}';
  refused := '{}';
  PERFORM queen.lock_cursors(p_ack_pids, p_ack_groups);
  PERFORM queen.kv_lock(w.ns, w.key)
     FROM (SELECT u.ns, u.key FROM unnest(a_op, a_ns, a_key) u(op, ns, key)
            WHERE u.op IN ('put', 'putIfAbsent', 'delete', 'check', 'incr')
            ORDER BY u.ns COLLATE "C", u.key COLLATE "C") w;
  SELECT o.answers, o.refused INTO answers, refused
    FROM queen.once_ack_batch(p_tx_ids, p_lent_leases, p_slot_counts, p_ack_counts, p_kv_counts,
      p_ack_slots, p_ack_txids, p_ack_pids, p_ack_statuses, p_ack_leases, p_ack_groups,
      a_op, a_ns, a_key, a_value, a_ttl, a_forever, a_required) o;
  IF answers IS NOT NULL THEN
    RETURN;
  END IF;
  answers := '{}';
  FOR i IN 1 .. cardinality(p_tx_ids) LOOP
    b := a + p_ack_counts[i] - 1;
    l := k + p_kv_counts[i] - 1;
    v_refusal := NULL;
    IF b >= a THEN
      SELECT v.verdicts INTO v_verdicts
        FROM queen.ack_verdicts(p_ack_txids[a:b], p_ack_pids[a:b], p_ack_statuses[a:b], p_ack_leases[a:b],
                                p_ack_groups[a:b], p_lent_leases[i]) v;
      v_refused := queen.ack_refused(p_ack_pids[a:b], p_ack_groups[a:b], v_verdicts);
      IF v_refused IS NOT NULL THEN
        v_refusal := jsonb_build_object('ackRefused', v_refused)::text;
      END IF;
    END IF;
    IF v_refusal IS NULL AND l = k AND a_required[k] AND a_op[k] IN ('put', 'putIfAbsent') THEN
      v_kv := queen.kv_put_verdict(a_ns[k], a_key[k], CASE WHEN a_op[k] = 'put' THEN a_expect[k] ELSE 0 END);
      IF v_kv IS NOT NULL THEN
        v_refusal := jsonb_build_object('kvLost', queen.kv_lost(p_slot_counts[i], a_key[k], v_kv))::text;
      END IF;
    END IF;
    IF v_refusal IS NOT NULL THEN
      answers := answers || v_refusal;
      refused := refused || true;
    ELSE
      answers := answers || queen.transaction_rows(p_tx_ids[i], p_lent_leases[i], p_max_read_bytes,
        p_slot_counts[i],
        '{}'::integer[], '{}'::text[], '{}'::text[], '{}'::text[], '{}'::text[], '{}'::text[],
        p_ack_slots[a:b], p_ack_txids[a:b], p_ack_pids[a:b], p_ack_statuses[a:b], p_ack_errors[a:b],
        p_ack_leases[a:b], p_ack_groups[a:b],
        a_op[k:l], a_ns[k:l], a_key[k:l], a_value[k:l], a_ttl[k:l], a_forever[k:l], a_expect[k:l],
        a_required[k:l], a_delta[k:l], a_min[k:l], a_max[k:l], a_keys[k:l], a_prefix[k:l], a_after[k:l],
        a_limit[k:l], a_keys_only[k:l],
        '{}'::text[], '{}'::text[], '{}'::text[], '{}'::text[], '{}'::text[], '{}'::bigint[], '{}'::text[])::text;
      refused := refused || false;
    END IF;
    a := b + 1;
    k := l + 1;
  END LOOP;
END $$;

-- The idempotent consumer's batch in one pass (queen.transaction_batch):
-- every bundle holds completions only and at most one KV op, a required
-- putIfAbsent (the `once` marker), and no cursor or key is named by two
-- bundles. Then no bundle can see another's writes, so every bundle is
-- decided against the state as found (the caller holds the cursor and key
-- locks): its acks' verdicts (strict), then whether its marker is live.
-- The accepted bundles' acks are applied in one statement
-- (queen.ack_completions) and their markers in another; each answer is the
-- one transaction_rows gives the bundle alone, a refused bundle's its
-- refusal (refused[i]). NULLs when the batch is not of that shape: the
-- caller takes the bundles one by one.
CREATE OR REPLACE FUNCTION queen.once_ack_batch(
  p_tx_ids text[], p_lent_leases text[], p_slot_counts integer[], p_ack_counts integer[], p_kv_counts integer[],
  p_ack_slots integer[], p_ack_txids text[], p_ack_pids uuid[], p_ack_statuses text[], p_ack_leases text[],
  p_ack_groups text[],
  a_op text[], a_ns text[], a_key text[], a_value jsonb[], a_ttl bigint[], a_forever boolean[], a_required boolean[],
  OUT answers text[], OUT refused boolean[])
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $$
DECLARE
  v_n integer := cardinality(p_tx_ids);
  b integer;
  k integer;
  v_bundle_of_ack integer[];
  v_bundle_of_kv integer[];
  v_verdicts text[];
  v_seqs bigint[];
  v_leases text[];
  v_answers text[];
  v_accepted integer[];
BEGIN
  IF v_n < 2 OR NOT (coalesce(p_ack_statuses, '{}') <@ ARRAY['completed'])
     OR EXISTS (SELECT 1 FROM unnest(p_kv_counts) c WHERE c > 1)
     OR EXISTS (SELECT 1 FROM unnest(a_op, a_required) u(op, req) WHERE u.op <> 'putIfAbsent' OR NOT u.req) THEN
    RETURN;
  END IF;
  -- Each ack's and KV op's bundle (from 1), from the per-bundle counts.
  SELECT coalesce(array_agg(b.n ORDER BY b.n), '{}') INTO v_bundle_of_ack
    FROM unnest(p_ack_counts) WITH ORDINALITY b(c, n), generate_series(1, b.c);
  SELECT coalesce(array_agg(b.n ORDER BY b.n), '{}') INTO v_bundle_of_kv
    FROM unnest(p_kv_counts) WITH ORDINALITY b(c, n), generate_series(1, b.c);
  IF EXISTS (SELECT 1 FROM unnest(p_ack_pids, p_ack_groups, v_bundle_of_ack) u(pid, grp, b)
              GROUP BY u.pid, u.grp HAVING count(DISTINCT u.b) > 1)
     OR EXISTS (SELECT 1 FROM unnest(a_ns, a_key) u(ns, key) GROUP BY u.ns, u.key HAVING count(*) > 1) THEN
    RETURN;
  END IF;

  -- The acks' verdicts, each under its own lease or its bundle's lent one.
  -- (Into a variable first: a sub-select among its arguments would keep
  -- ack_verdicts from being inlined, and it would be planned at every call.)
  SELECT array_agg(coalesce(nullif(u.lease, ''), p_lent_leases[u.b]) ORDER BY u.n) INTO v_leases
    FROM unnest(p_ack_leases, v_bundle_of_ack) WITH ORDINALITY u(lease, b, n);
  SELECT v.verdicts, v.seqs INTO v_verdicts, v_seqs
    FROM queen.ack_verdicts(p_ack_txids, p_ack_pids, p_ack_statuses, v_leases, p_ack_groups, NULL) v;
  v_answers := array_fill(NULL::text, ARRAY[v_n]);
  -- Refused by an ack: the first cursor of the bundle with a refused item.
  FOR b IN SELECT DISTINCT u.b FROM unnest(v_verdicts, v_bundle_of_ack) u(verdict, b) WHERE u.verdict <> 'ok' LOOP
    v_answers[b] := (SELECT jsonb_build_object('ackRefused',
                              queen.ack_refused(array_agg(u.pid ORDER BY u.n), array_agg(u.grp ORDER BY u.n),
                                                array_agg(u.verdict ORDER BY u.n)))::text
                       FROM unnest(p_ack_pids, p_ack_groups, v_verdicts, v_bundle_of_ack)
                            WITH ORDINALITY u(pid, grp, verdict, bb, n)
                      WHERE u.bb = b);
  END LOOP;
  -- Refused by its marker: a live row under the key (its lock is held).
  -- (A scalar sub-select per key: an index probe whatever the table's size
  -- was when the generic plan was made; a join here became a hash join over
  -- a sequential scan of queen.kv once the table grew.)
  FOR b, k IN
    SELECT u.b, u.n FROM unnest(a_ns, a_key, v_bundle_of_kv) WITH ORDINALITY u(ns, key, b, n)
     WHERE (SELECT true FROM queen.kv t WHERE t.ns = u.ns AND t.key = u.key
               AND (t.expires_at IS NULL OR t.expires_at > now()))
  LOOP
    IF v_answers[b] IS NULL THEN
      v_answers[b] := jsonb_build_object('kvLost', queen.kv_lost(p_slot_counts[b], a_key[k],
        (SELECT queen.kv_refused(a_key[k], 'exists', t) FROM queen.kv t WHERE t.ns = a_ns[k] AND t.key = a_key[k])))::text;
    END IF;
  END LOOP;
  SELECT coalesce(array_agg(n::integer), '{}') INTO v_accepted
    FROM generate_series(1, v_n) n WHERE v_answers[n] IS NULL;
  SELECT array_agg(v_answers[n] IS NOT NULL ORDER BY n) INTO refused FROM generate_series(1, v_n) n;

  -- The accepted bundles' acks, in one statement.
  PERFORM queen.ack_completions(array_agg(u.pid), array_agg(u.grp), array_agg(u.seq), array_agg(u.verdict))
     FROM unnest(p_ack_pids, p_ack_groups, v_seqs, v_verdicts, v_bundle_of_ack) u(pid, grp, seq, verdict, b)
    WHERE u.b = ANY (v_accepted)
   HAVING count(*) > 0;
  -- Their markers, in one statement, and each bundle's answer.
  WITH marked AS (
    INSERT INTO queen.kv AS t (ns, key, value, version, expires_at, updated_at)
    SELECT u.ns, u.key, u.value, nextval('queen.kv_version_seq'), queen.kv_expiry(u.ttl, u.forever), now()
      FROM unnest(a_ns, a_key, a_value, a_ttl, a_forever, v_bundle_of_kv) u(ns, key, value, ttl, forever, b)
     WHERE u.b = ANY (v_accepted)
    ON CONFLICT (ns, key) DO UPDATE
      SET value = EXCLUDED.value, version = EXCLUDED.version,
          expires_at = EXCLUDED.expires_at, updated_at = EXCLUDED.updated_at
      WHERE t.expires_at IS NOT NULL AND t.expires_at <= now()
    RETURNING t.ns, t.key, t.value, t.version
  ), kv_results AS (
    SELECT u.b, jsonb_build_object('applied', true, 'key', m.key, 'value', m.value, 'version', m.version) AS r
      FROM unnest(a_ns, a_key, v_bundle_of_kv) u(ns, key, b)
      JOIN marked m ON m.ns = u.ns AND m.key = u.key
  ), ack_results AS (
    SELECT u.b, array_agg(false) AS r
      FROM unnest(v_bundle_of_ack) u(b)
     WHERE u.b = ANY (v_accepted)
     GROUP BY u.b
  )
  SELECT array_agg(coalesce(v_answers[n],
           queen.tx_record(p_tx_ids[n], NULL, a.r,
                           CASE WHEN kr.r IS NULL THEN '[]'::jsonb ELSE jsonb_build_array(kr.r) END,
                           NULL)::text) ORDER BY n)
    INTO answers
    FROM generate_series(1, v_n) n
    LEFT JOIN ack_results a ON a.b = n
    LEFT JOIN kv_results kr ON kr.b = n;
END $$;
