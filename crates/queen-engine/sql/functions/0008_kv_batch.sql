-- queen.kv_apply runs a checked call in one transaction: `get`s first (they see the state before the
-- call's writes), then writes in (ns, key) byte order, then getMany and
-- getPrefix (they see the writes). Results stay index-aligned.
--
-- p_ctx: {"tx": bool, "txId": text, "offset": int, "maxReadBytes": int}.
-- In a transaction (tx = true): at most 64 ops, no getPrefix, result
-- elements carry "type": "kv", indexes start at `offset` (the flat index
-- space), and a lost `required` precondition answers the transaction body.

-- A key field: a non-empty string of at most 512 bytes without NUL.
CREATE OR REPLACE FUNCTION queen.kv_key_arg(j json, field text) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
  v text;
BEGIN
  IF json_typeof(j) IS DISTINCT FROM 'string' THEN
    PERFORM queen.kv_reject('kv_bad_key', field || ' must be a string');
  END IF;
  -- NUL cannot be stored in text; detect the escape before decoding.
  IF j::text ~ '(^|[^\\])(\\\\)*\\u0000' THEN
    PERFORM queen.kv_reject('kv_bad_key', field || ' must not contain NUL');
  END IF;
  v := j #>> '{}';
  IF v = '' THEN
    PERFORM queen.kv_reject('kv_bad_key', field || ' must not be empty');
  END IF;
  IF octet_length(v) > 512 THEN
    PERFORM queen.kv_reject('kv_key_too_large', field || ' is longer than 512 bytes', 413);
  END IF;
  RETURN v;
END $$;

-- An integer JSON number of any size, or NULL when absent.
CREATE OR REPLACE FUNCTION queen.kv_int_arg(j json, field text, reason text) RETURNS numeric
LANGUAGE plpgsql AS $$
BEGIN
  IF j IS NULL OR json_typeof(j) = 'null' THEN
    RETURN NULL;
  END IF;
  IF json_typeof(j) <> 'number' OR j::text !~ '^-?[0-9]+$' THEN
    PERFORM queen.kv_reject(reason, field || ' must be an integer');
  END IF;
  RETURN j::text::numeric;
END $$;

CREATE OR REPLACE FUNCTION queen.kv_batch(p_body json, p_ctx jsonb) RETURNS json
LANGUAGE plpgsql AS $$
DECLARE
  v_tx boolean := coalesce((p_ctx ->> 'tx')::boolean, false);
  v_offset integer := coalesce((p_ctx ->> 'offset')::integer, 0);
  v_max_bytes bigint := coalesce((p_ctx ->> 'maxReadBytes')::bigint, 4194304);
  v_ops json;
  v_n integer;
  o json;
  i integer;
  f text;
  v_name text;
  v_ttl numeric;
  a_op text[] := '{}';
  a_ns text[] := '{}';
  a_key text[] := '{}';
  a_value jsonb[] := '{}';
  a_ttl bigint[] := '{}';
  a_forever boolean[] := '{}';
  a_expect bigint[] := '{}';
  a_required boolean[] := '{}';
  a_delta numeric[] := '{}';
  a_min numeric[] := '{}';
  a_max numeric[] := '{}';
  a_keys jsonb[] := '{}';
  a_prefix text[] := '{}';
  a_after text[] := '{}';
  a_limit integer[] := '{}';
  a_keys_only boolean[] := '{}';
  v_keys text[];
  v_res jsonb[];
  r jsonb;
  w record;
  v_dup record;
BEGIN
  -- PostgreSQL cannot decode \u0000 into text, and any field access on a
  -- json document that holds one fails; refuse it before looking inside.
  IF p_body::text ~ '(^|[^\\])(\\\\)*\\u0000' THEN
    PERFORM queen.kv_reject('kv_bad_key', 'keys and values must not contain NUL (\u0000)');
  END IF;
  IF json_typeof(p_body) = 'object' THEN
    IF p_body -> 'tenant' IS NOT NULL THEN
      PERFORM queen.kv_reject('kv_tenant_not_an_input', 'tenant is derived by the broker, never sent');
    END IF;
    v_ops := p_body -> 'operations';
  ELSIF json_typeof(p_body) = 'array' THEN
    v_ops := p_body;
  END IF;
  IF json_typeof(v_ops) IS DISTINCT FROM 'array' THEN
    PERFORM queen.kv_reject('kv_bad_body', 'the body must be {"operations": [...]} or an array of operations');
  END IF;
  v_n := json_array_length(v_ops);
  IF v_n > (CASE WHEN v_tx THEN 64 ELSE 256 END) THEN
    PERFORM queen.kv_reject('kv_too_many_ops',
      'at most ' || CASE WHEN v_tx THEN 64 ELSE 256 END || ' kv operations per ' || CASE WHEN v_tx THEN 'transaction' ELSE 'call' END);
  END IF;

  -- Validate everything first: a refused call writes nothing.
  FOR i IN 1 .. v_n LOOP
    o := v_ops -> (i - 1);
    f := 'operations[' || (i - 1) || ']';
    IF json_typeof(o) IS DISTINCT FROM 'object' THEN
      PERFORM queen.kv_reject('kv_bad_body', f || ' must be an object');
    END IF;
    IF o -> 'tenant' IS NOT NULL THEN
      PERFORM queen.kv_reject('kv_tenant_not_an_input', f || '.tenant is derived by the broker, never sent');
    END IF;
    v_name := CASE WHEN json_typeof(o -> 'op') = 'string' THEN o ->> 'op' END;
    IF v_name IS NULL OR v_name NOT IN ('get', 'getMany', 'getPrefix', 'put', 'putIfAbsent', 'delete', 'check', 'incr') THEN
      PERFORM queen.kv_reject('kv_unknown_op', f || '.op must be one of get, getMany, getPrefix, put, putIfAbsent, delete, check, incr');
    END IF;
    IF v_tx AND v_name = 'getPrefix' THEN
      PERFORM queen.kv_reject('kv_get_prefix_not_allowed_in_transaction', f || ': getPrefix is not allowed inside a transaction');
    END IF;
    IF json_typeof(o -> 'ns') IS DISTINCT FROM 'string' OR (o ->> 'ns') !~ '^[a-z0-9][a-z0-9._-]{0,63}$' THEN
      PERFORM queen.kv_reject('kv_bad_namespace', f || '.ns must match ^[a-z0-9][a-z0-9._-]{0,63}$');
    END IF;
    a_op := a_op || v_name;
    a_ns := a_ns || (o ->> 'ns');

    -- key
    IF v_name IN ('getMany', 'getPrefix') THEN
      a_key := a_key || NULL::text;
    ELSE
      a_key := a_key || queen.kv_key_arg(o -> 'key', f || '.key');
    END IF;
    IF v_name = 'getMany' THEN
      IF json_typeof(o -> 'keys') IS DISTINCT FROM 'array' OR json_array_length(o -> 'keys') = 0 THEN
        PERFORM queen.kv_reject('kv_bad_key', f || '.keys must be a non-empty array of keys');
      END IF;
      IF json_array_length(o -> 'keys') > 1000 THEN
        PERFORM queen.kv_reject('kv_too_many_keys', f || '.keys holds more than 1000 keys');
      END IF;
      PERFORM queen.kv_key_arg(k, f || '.keys[]') FROM json_array_elements(o -> 'keys') k;
    END IF;
    IF v_name = 'getPrefix' THEN
      IF o -> 'prefix' IS NULL OR json_typeof(o -> 'prefix') = 'null' OR o ->> 'prefix' = '' THEN
        PERFORM queen.kv_reject('kv_prefix_required', f || '.prefix is required and must not be empty');
      END IF;
      PERFORM queen.kv_key_arg(o -> 'prefix', f || '.prefix');
      IF o -> 'after' IS NOT NULL AND json_typeof(o -> 'after') <> 'null' THEN
        PERFORM queen.kv_key_arg(o -> 'after', f || '.after');
      END IF;
      PERFORM queen.kv_int_arg(o -> 'limit', f || '.limit', 'kv_bad_body');
      IF json_typeof(o -> 'keysOnly') NOT IN ('boolean', 'null') THEN
        PERFORM queen.kv_reject('kv_bad_body', f || '.keysOnly must be a boolean');
      END IF;
    END IF;

    -- value
    IF v_name IN ('put', 'putIfAbsent') THEN
      IF o -> 'value' IS NULL THEN
        PERFORM queen.kv_reject('kv_bad_body', f || '.value is required (null is a legal value)');
      END IF;
      IF octet_length((o -> 'value')::text) > 65536 THEN
        PERFORM queen.kv_reject('kv_value_too_large', f || '.value is larger than 64 KiB', 413);
      END IF;
      IF (o -> 'value')::text ~ '(^|[^\\])(\\\\)*\\u0000' THEN
        PERFORM queen.kv_reject('kv_bad_body', f || '.value contains \u0000, which jsonb cannot store');
      END IF;
      a_value := a_value || (o -> 'value')::jsonb;
    ELSE
      a_value := a_value || NULL::jsonb;
    END IF;

    -- expiry: exactly one, on put, putIfAbsent and incr only
    IF v_name IN ('put', 'putIfAbsent', 'incr') THEN
      IF (o -> 'ttlSeconds' IS NULL OR json_typeof(o -> 'ttlSeconds') = 'null')
         = (o -> 'forever' IS NULL OR json_typeof(o -> 'forever') = 'null') THEN
        PERFORM queen.kv_reject('kv_expiry_not_specified', f || ' must carry exactly one of ttlSeconds or forever: true');
      END IF;
      IF o -> 'forever' IS NOT NULL AND json_typeof(o -> 'forever') <> 'null' THEN
        IF json_typeof(o -> 'forever') <> 'boolean' OR NOT (o ->> 'forever')::boolean THEN
          PERFORM queen.kv_reject('kv_bad_ttl', f || '.forever must be true when given');
        END IF;
        a_forever := a_forever || true;
        a_ttl := a_ttl || NULL::bigint;
      ELSE
        v_ttl := queen.kv_int_arg(o -> 'ttlSeconds', f || '.ttlSeconds', 'kv_bad_ttl');
        IF v_ttl <= 0 OR v_ttl > 3153600000 THEN
          PERFORM queen.kv_reject('kv_bad_ttl', f || '.ttlSeconds must be an integer from 1 to 3153600000');
        END IF;
        a_forever := a_forever || NULL::boolean;
        a_ttl := a_ttl || v_ttl::bigint;
      END IF;
    ELSE
      IF o -> 'ttlSeconds' IS NOT NULL OR o -> 'forever' IS NOT NULL THEN
        PERFORM queen.kv_reject('kv_bad_ttl', f || ': ' || v_name || ' takes no expiry');
      END IF;
      a_forever := a_forever || NULL::boolean;
      a_ttl := a_ttl || NULL::bigint;
    END IF;

    -- expect
    IF o -> 'expect' IS NOT NULL AND json_typeof(o -> 'expect') <> 'null' THEN
      IF v_name NOT IN ('put', 'delete', 'check') THEN
        PERFORM queen.kv_reject('kv_bad_expect', f || ': ' || v_name || ' never carries expect');
      END IF;
      IF json_typeof(o -> 'expect') <> 'number' OR (o -> 'expect')::text !~ '^[0-9]{1,18}$' THEN
        PERFORM queen.kv_reject('kv_bad_expect', f || '.expect must be an integer >= 0');
      END IF;
      a_expect := a_expect || (o -> 'expect')::text::bigint;
    ELSIF v_name = 'check' THEN
      PERFORM queen.kv_reject('kv_bad_expect', f || ': check needs expect, an integer >= 0');
    ELSE
      a_expect := a_expect || NULL::bigint;
    END IF;

    IF json_typeof(o -> 'required') NOT IN ('boolean', 'null') THEN
      PERFORM queen.kv_reject('kv_bad_body', f || '.required must be a boolean');
    END IF;
    a_required := a_required || coalesce((o ->> 'required')::boolean, false);

    IF v_name = 'incr' THEN
      a_delta := a_delta || coalesce(queen.kv_int_arg(o -> 'delta', f || '.delta', 'kv_bad_body'), 1);
      a_min := a_min || queen.kv_int_arg(o -> 'min', f || '.min', 'kv_bad_body');
      a_max := a_max || queen.kv_int_arg(o -> 'max', f || '.max', 'kv_bad_body');
    ELSE
      a_delta := a_delta || NULL::numeric; a_min := a_min || NULL::numeric; a_max := a_max || NULL::numeric;
    END IF;

    a_keys := a_keys || CASE WHEN v_name = 'getMany' THEN (o -> 'keys')::jsonb END;
    IF v_name = 'getPrefix' THEN
      a_prefix := a_prefix || (o ->> 'prefix');
      a_after := a_after || (o ->> 'after');
      a_limit := a_limit || least(greatest(coalesce(queen.kv_int_arg(o -> 'limit', 'limit', 'kv_bad_body'), 100), 1), 1000)::integer;
      a_keys_only := a_keys_only || coalesce((o ->> 'keysOnly')::boolean, false);
    ELSE
      a_prefix := a_prefix || NULL::text; a_after := a_after || NULL::text;
      a_limit := a_limit || NULL::integer; a_keys_only := a_keys_only || NULL::boolean;
    END IF;
  END LOOP;

  SELECT u.ns, u.key INTO v_dup
    FROM unnest(a_op, a_ns, a_key) u(op, ns, key)
   WHERE u.op IN ('put', 'putIfAbsent', 'delete', 'check', 'incr')
   GROUP BY u.ns, u.key HAVING count(*) > 1
   LIMIT 1;
  IF v_dup.key IS NOT NULL THEN
    PERFORM queen.kv_reject('kv_duplicate_key_in_call',
      'at most one write per key in one call; ' || v_dup.ns || '/' || v_dup.key || ' appears twice');
  END IF;

  RETURN queen.kv_apply(a_op, a_ns, a_key, a_value, a_ttl, a_forever, a_expect, a_required,
                        a_delta, a_min, a_max, a_keys, a_prefix, a_after, a_limit, a_keys_only, p_ctx);
END $$;

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
  v_tx boolean := coalesce((p_ctx ->> 'tx')::boolean, false);
  v_offset integer := coalesce((p_ctx ->> 'offset')::integer, 0);
  v_max_bytes bigint := coalesce((p_ctx ->> 'maxReadBytes')::bigint, 4194304);
  v_n integer := coalesce(array_length(a_op, 1), 0);
  i integer;
  v_keys text[];
  v_res jsonb[];
  r jsonb;
  w record;
BEGIN
  v_res := array_fill(NULL::jsonb, ARRAY[greatest(v_n, 1)]);

  -- 1. get: the state before this call's writes.
  FOR i IN 1 .. v_n LOOP
    IF a_op[i] = 'get' THEN
      v_res[i] := queen.kv_get(a_ns[i], a_key[i]);
    END IF;
  END LOOP;

  -- 2. writes, in (ns, key) byte order.
  FOR w IN
    SELECT u.n::integer AS n
      FROM unnest(a_op, a_ns, a_key) WITH ORDINALITY u(op, ns, key, n)
     WHERE u.op IN ('put', 'putIfAbsent', 'delete', 'check', 'incr')
     ORDER BY u.ns COLLATE "C", u.key COLLATE "C"
  LOOP
    i := w.n;
    r := CASE a_op[i]
      WHEN 'put' THEN queen.kv_put(a_ns[i], a_key[i], a_value[i], a_ttl[i], a_forever[i], a_expect[i])
      WHEN 'putIfAbsent' THEN queen.kv_put_if_absent(a_ns[i], a_key[i], a_value[i], a_ttl[i], a_forever[i])
      WHEN 'delete' THEN queen.kv_delete(a_ns[i], a_key[i], a_expect[i])
      WHEN 'check' THEN queen.kv_check(a_ns[i], a_key[i], a_expect[i])
      WHEN 'incr' THEN queen.kv_incr(a_ns[i], a_key[i], a_delta[i], a_min[i], a_max[i], a_ttl[i], a_forever[i])
    END;
    IF a_required[i] AND NOT (r ->> 'applied')::boolean THEN
      -- Abort the whole call (and, in a transaction, the bundle).
      RAISE EXCEPTION USING ERRCODE = 'QN200', MESSAGE = (
        CASE WHEN v_tx THEN jsonb_build_object('transactionId', p_ctx ->> 'txId', 'success', false,
               'error', 'kv precondition lost at index ' || (v_offset + i - 1) || ' (' || (r ->> 'reason')
                        || '); the transaction rolled back',
               'results', '[]'::jsonb)
             ELSE '{}'::jsonb END
        || jsonb_build_object('ok', false, 'reason', 'kv_precondition', 'failedIndex', v_offset + i - 1,
             'kvReason', r ->> 'reason', 'key', a_key[i], 'version', r -> 'version', 'value', r -> 'value'))::text;
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

  r := coalesce((SELECT jsonb_agg(
         jsonb_build_object('index', v_offset + n - 1, 'op', a_op[n])
         || CASE WHEN v_tx THEN '{"type": "kv"}'::jsonb ELSE '{}'::jsonb END
         || x ORDER BY n)
       FROM unnest(v_res[1:v_n]) WITH ORDINALITY u(x, n)), '[]'::jsonb);
  IF v_tx THEN
    RETURN r::json;
  END IF;
  RETURN json_build_object('results', r);
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
