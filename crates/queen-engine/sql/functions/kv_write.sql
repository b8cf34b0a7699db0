-- queen.kv_apply runs a checked call in one transaction: `get`s first (they
-- see the state before the call's writes), then writes in (ns, key) byte
-- order, then getMany and getPrefix (they see the writes). Answers each
-- op's outcome (its fields as queen_wire::KvResult reads them, without
-- index and op: the engine writes the elements), index-aligned.
--
-- p_ctx: {"offset": int, "maxReadBytes": int}. In a transaction the
-- engine allows at most 64 ops and no getPrefix, and `offset` is where the
-- ops start in the flat index space. A lost `required` precondition raises
-- QN201 with queen.kv_lost.

-- The call itself, on checked ops (the engine decodes them, kv_decode.rs):
-- one element per op in every array. a_keys holds a getMany's keys as a
-- JSON array; a_limit a getPrefix's page size, already clamped.
CREATE OR REPLACE FUNCTION queen.kv_apply(
  a_op text[], a_ns text[], a_key text[], a_value jsonb[], a_ttl bigint[], a_forever boolean[],
  a_expect bigint[], a_required boolean[], a_delta numeric[], a_min numeric[], a_max numeric[],
  a_keys jsonb[], a_prefix text[], a_after text[], a_limit integer[], a_keys_only boolean[], p_ctx jsonb)
RETURNS json
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $$
DECLARE
  v_offset integer := coalesce((p_ctx ->> 'offset')::integer, 0);
  v_max_bytes bigint := coalesce((p_ctx ->> 'maxReadBytes')::bigint, 4194304);
  v_n integer := coalesce(array_length(a_op, 1), 0);
  i integer;
  v_keys text[];
  v_res jsonb[];
  r jsonb;
  v_writes integer[];
BEGIN
  v_res := array_fill(NULL::jsonb, ARRAY[greatest(v_n, 1)]);

  -- 1. get: the state before this call's writes.
  FOR i IN 1 .. v_n LOOP
    IF a_op[i] = 'get' THEN
      v_res[i] := queen.kv_get(a_ns[i], a_key[i]);
    END IF;
  END LOOP;

  -- 2. writes, in (ns, key) byte order. A single op (the `once` of a
  -- bundle) has no order to find, and skips that statement: every
  -- statement a function runs pays its executor start-up.
  IF v_n = 1 THEN
    v_writes := CASE WHEN a_op[1] IN ('put', 'putIfAbsent', 'delete', 'check', 'incr')
                     THEN ARRAY[1] ELSE '{}'::integer[] END;
  ELSE
    SELECT coalesce(array_agg(u.n::integer ORDER BY u.ns COLLATE "C", u.key COLLATE "C", u.n), '{}')
      INTO v_writes
      FROM unnest(a_op, a_ns, a_key) WITH ORDINALITY u(op, ns, key, n)
     WHERE u.op IN ('put', 'putIfAbsent', 'delete', 'check', 'incr');
  END IF;
  FOREACH i IN ARRAY v_writes
  LOOP
    r := CASE a_op[i]
      WHEN 'put' THEN queen.kv_put(a_ns[i], a_key[i], a_value[i], a_ttl[i], a_forever[i], a_expect[i])
      WHEN 'putIfAbsent' THEN queen.kv_put_if_absent(a_ns[i], a_key[i], a_value[i], a_ttl[i], a_forever[i])
      WHEN 'delete' THEN queen.kv_delete(a_ns[i], a_key[i], a_expect[i])
      WHEN 'check' THEN queen.kv_check(a_ns[i], a_key[i], a_expect[i])
      WHEN 'incr' THEN queen.kv_incr(a_ns[i], a_key[i], a_delta[i], a_min[i], a_max[i], a_ttl[i], a_forever[i])
    END;
    IF a_required[i] AND NOT (r ->> 'applied')::boolean THEN
      -- Abort the whole call (and, in a transaction, the bundle).
      RAISE EXCEPTION USING ERRCODE = 'QN201', MESSAGE = queen.kv_lost(v_offset + i - 1, a_key[i], r)::text;
    END IF;
    v_res[i] := r;
  END LOOP;

  -- 3. multi-key reads, which see the writes.
  FOR i IN 1 .. v_n LOOP
    IF a_op[i] = 'getMany' THEN
      SELECT array_agg(k ORDER BY n) INTO v_keys
        FROM jsonb_array_elements_text(a_keys[i]) WITH ORDINALITY e(k, n);
      v_res[i] := queen.kv_get_many(a_ns[i], v_keys, v_max_bytes);
    ELSIF a_op[i] = 'getPrefix' THEN
      v_res[i] := queen.kv_get_prefix(a_ns[i], a_prefix[i], a_after[i], a_limit[i], a_keys_only[i], v_max_bytes);
    END IF;
  END LOOP;

  RETURN coalesce(array_to_json(v_res[1:v_n]), '[]');
END $$;

-- The sweeper's step: deletes up to p_batch expired rows, skipping rows a
-- writer holds. Expired rows are already invisible, so this never changes
-- what a read sees. Answers the number of rows pruned.
CREATE OR REPLACE FUNCTION queen.kv_sweep(p_batch integer) RETURNS integer
LANGUAGE sql AS $$
  WITH doomed AS (
    SELECT ns, key FROM queen.kv
     WHERE expires_at <= now()
     LIMIT p_batch
     FOR UPDATE SKIP LOCKED
  ), gone AS (
    DELETE FROM queen.kv k USING doomed d
     WHERE k.ns = d.ns AND k.key = d.key AND k.expires_at <= now()
    RETURNING 1
  )
  SELECT count(*)::integer FROM gone
$$;

-- Single-op writes of several calls in one statement (the KV write batcher,
-- batch.rs): each member gets the verdict a call of its own would have had.
-- Members run in (ns, key) byte order, arrival order within a key: the
-- order kv_apply locks keys in, so a batch and a multi-op call never
-- deadlock (every member takes its key lock before its row lock), and
-- members on one key see each other exactly as serial calls would (one putIfAbsent winner, incr never past max, versions rising).
-- No subtransaction: a member's refusal is its answer, not an exception.
-- The arrays are kv_apply's (one element per member; the read-only ones
-- are unused here). Answers the verdicts in member order.
CREATE OR REPLACE FUNCTION queen.kv_write_rows(
  a_op text[], a_ns text[], a_key text[], a_value jsonb[], a_ttl bigint[], a_forever boolean[],
  a_expect bigint[], a_required boolean[], a_delta numeric[], a_min numeric[], a_max numeric[],
  a_keys jsonb[], a_prefix text[], a_after text[], a_limit integer[], a_keys_only boolean[])
RETURNS text[]
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $$
DECLARE
  v_n integer := coalesce(array_length(a_op, 1), 0);
  v_res text[];
  w record;
  i integer;
BEGIN
  v_res := array_fill(NULL::text, ARRAY[greatest(v_n, 1)]);
  FOR w IN
    SELECT u.n::integer AS n
      FROM unnest(a_ns, a_key) WITH ORDINALITY u(ns, key, n)
     ORDER BY u.ns COLLATE "C", u.key COLLATE "C", u.n
  LOOP
    i := w.n;
    -- delete and check lock only the row, so a later member on the same
    -- key would take the key lock after the row lock: take it first.
    PERFORM queen.kv_lock(a_ns[i], a_key[i]);
    v_res[i] := (CASE a_op[i]
      WHEN 'put' THEN queen.kv_put(a_ns[i], a_key[i], a_value[i], a_ttl[i], a_forever[i], a_expect[i])
      WHEN 'putIfAbsent' THEN queen.kv_put(a_ns[i], a_key[i], a_value[i], a_ttl[i], a_forever[i], 0)
      WHEN 'delete' THEN queen.kv_delete(a_ns[i], a_key[i], a_expect[i])
      WHEN 'check' THEN queen.kv_check(a_ns[i], a_key[i], a_expect[i])
      WHEN 'incr' THEN queen.kv_incr(a_ns[i], a_key[i], a_delta[i], a_min[i], a_max[i], a_ttl[i], a_forever[i])
    END)::text;
  END LOOP;
  RETURN v_res[1:v_n];
END $$;

-- The version of a write to (ns, key), drawn under the key's lock: the rule
-- of queen.kv_lock (writers of a key draw in commit order), for a statement
-- that writes many keys one row at a time (statements/kv_put_batch.sql).
CREATE OR REPLACE FUNCTION queen.kv_lock_version(p_ns text, p_key text) RETURNS bigint
LANGUAGE plpgsql AS $$
BEGIN
  PERFORM queen.kv_lock(p_ns, p_key);
  RETURN nextval('queen.kv_version_seq');
END $$;
