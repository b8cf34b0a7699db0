-- KV state: one function per operation. A call of one op runs its function
-- (or, for a get, a plain SELECT) in a statement of its own or, when calls
-- arrive together, in a batch's statement (queen.kv_write_rows, 0008);
-- queen.kv_apply (0008) runs a call of several, and the transaction's `kv`
-- rider. The
-- request is checked in Rust (kv_decode.rs); what needs the database is
-- here and nowhere else: expired means absent, expect, min/max,
-- create-only TTL for incr, versions.
--
-- Locks: writes lock their key's row (INSERT ... ON CONFLICT, UPDATE,
-- DELETE or SELECT ... FOR UPDATE) and kv_apply applies writes in (ns, key)
-- byte order, so two calls can never deadlock on each other.

-- A KV 400 (or 413): {"error", "reason", "detail"}. `error` is the only
-- field clients branch on; no `code` that could disagree with it.
CREATE OR REPLACE FUNCTION queen.kv_reject(reason text, detail text, status integer DEFAULT 400)
RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION USING
    ERRCODE = CASE WHEN status = 413 THEN 'QN413' ELSE 'QN400' END,
    MESSAGE = json_build_object(
      'error', CASE WHEN status = 413 THEN 'payload_too_large' ELSE 'kv_bad_request' END,
      'reason', reason, 'detail', detail)::text;
END $$;

-- The expiry a write carries: exactly one of ttlSeconds (integer > 0) or
-- forever: true. NULL means forever.
CREATE OR REPLACE FUNCTION queen.kv_expiry(p_ttl_seconds bigint, p_forever boolean)
RETURNS timestamptz
LANGUAGE plpgsql STABLE AS $$
BEGIN
  IF (p_ttl_seconds IS NULL) = (p_forever IS NULL) THEN
    PERFORM queen.kv_reject('kv_expiry_not_specified', 'a write carries exactly one of ttlSeconds or forever: true');
  END IF;
  IF p_forever IS NOT NULL THEN
    IF NOT p_forever THEN
      PERFORM queen.kv_reject('kv_bad_ttl', 'forever must be true when given');
    END IF;
    RETURN NULL;
  END IF;
  IF p_ttl_seconds <= 0 THEN
    PERFORM queen.kv_reject('kv_bad_ttl', 'ttlSeconds must be an integer above 0');
  END IF;
  RETURN now() + make_interval(secs => p_ttl_seconds);
END $$;

-- A row as reads answer it.
CREATE OR REPLACE FUNCTION queen.kv_row_json(k queen.kv, with_value boolean DEFAULT true)
RETURNS jsonb
LANGUAGE sql STABLE AS $$
  SELECT CASE WHEN with_value
    THEN jsonb_build_object('key', k.key, 'value', k.value, 'version', k.version,
           'expiresAt', queen.iso(k.expires_at), 'updatedAt', queen.iso(k.updated_at))
    ELSE jsonb_build_object('key', k.key, 'version', k.version,
           'expiresAt', queen.iso(k.expires_at), 'updatedAt', queen.iso(k.updated_at))
  END
$$;

-- The live row of a key, or NULL.
CREATE OR REPLACE FUNCTION queen.kv_live(p_ns text, p_key text) RETURNS queen.kv
LANGUAGE sql STABLE AS $$
  SELECT * FROM queen.kv
   WHERE ns = p_ns AND key = p_key AND (expires_at IS NULL OR expires_at > now())
$$;

-- A write that did not apply: what a reader would see now.
CREATE OR REPLACE FUNCTION queen.kv_refused(p_key text, p_reason text, k queen.kv) RETURNS jsonb
LANGUAGE sql STABLE AS $$
  SELECT jsonb_build_object('applied', false, 'reason', p_reason, 'key', p_key,
           'value', CASE WHEN k.version IS NULL THEN 'null'::jsonb ELSE k.value END,
           'version', coalesce(k.version, 0))
$$;

-- Whether queen.kv_put with this expect would apply now, without writing:
-- NULL when it would, else the refusal it would answer. The same rules as
-- kv_put (expect NULL: always; 0: only over an absent or expired row; N:
-- only over the live row of version N). For deciding a bundle before
-- applying it (queen.transaction_batch); the caller holds the key's lock.
CREATE OR REPLACE FUNCTION queen.kv_put_verdict(p_ns text, p_key text, p_expect bigint) RETURNS jsonb
LANGUAGE plpgsql STABLE AS $$
DECLARE
  k queen.kv;
BEGIN
  IF p_expect IS NULL THEN
    RETURN NULL;
  END IF;
  -- kv_live's query, here so that it is planned once (a SQL function
  -- returning a row is planned again at every call).
  SELECT * INTO k FROM queen.kv t
   WHERE t.ns = p_ns AND t.key = p_key AND (t.expires_at IS NULL OR t.expires_at > now());
  IF p_expect = 0 THEN
    RETURN CASE WHEN k.version IS NOT NULL THEN queen.kv_refused(p_key, 'exists', k) END;
  END IF;
  RETURN CASE WHEN k.version IS NULL THEN queen.kv_refused(p_key, 'absent', k)
              WHEN k.version <> p_expect THEN queen.kv_refused(p_key, 'version', k) END;
END $$;

-- A lost `required` KV precondition, as SQL reports it (SQLSTATE QN201, or
-- a bundle batch's refusal): the index of the op that lost, its key, and the
-- winner the refusal saw (r: the op's answer, queen.kv_refused). The engine
-- writes the answers that carry it (queen_wire::PreconditionLost).
CREATE OR REPLACE FUNCTION queen.kv_lost(p_index bigint, p_key text, r jsonb)
RETURNS jsonb
LANGUAGE sql STABLE AS $$
  SELECT jsonb_build_object('failedIndex', p_index, 'kvReason', r ->> 'reason', 'key', p_key,
                            'version', r -> 'version', 'value', r -> 'value')
$$;

CREATE OR REPLACE FUNCTION queen.kv_get(p_ns text, p_key text) RETURNS jsonb
LANGUAGE plpgsql STABLE AS $$
DECLARE
  k queen.kv := queen.kv_live(p_ns, p_key);
BEGIN
  IF k.version IS NULL THEN
    RETURN jsonb_build_object('found', false, 'key', p_key);
  END IF;
  RETURN jsonb_build_object('found', true) || queen.kv_row_json(k);
END $$;

-- Rows in key byte order, absent keys in request order; keys cut by the
-- byte budget are in neither list.
CREATE OR REPLACE FUNCTION queen.kv_get_many(p_ns text, p_keys text[], p_max_bytes bigint) RETURNS jsonb
LANGUAGE plpgsql STABLE SET plan_cache_mode = force_generic_plan AS $$
DECLARE
  r record;
  v_rows jsonb := '[]';
  v_bytes bigint := 0;
  v_truncated boolean := false;
  v_kept text[] := '{}';
BEGIN
  FOR r IN
    SELECT k AS row, octet_length(k.value::text) AS size
      FROM queen.kv k
     WHERE k.ns = p_ns AND k.key = ANY (p_keys) AND (k.expires_at IS NULL OR k.expires_at > now())
     ORDER BY k.key
  LOOP
    IF v_bytes + r.size > p_max_bytes AND jsonb_array_length(v_rows) > 0 THEN
      v_truncated := true;
      EXIT;
    END IF;
    v_bytes := v_bytes + r.size;
    v_rows := v_rows || queen.kv_row_json(r.row);
    v_kept := v_kept || (r.row).key;
  END LOOP;
  RETURN jsonb_build_object('rows', v_rows,
    'missing', coalesce((SELECT jsonb_agg(x ORDER BY n) FROM unnest(p_keys) WITH ORDINALITY u(x, n)
                          WHERE NOT EXISTS (SELECT 1 FROM queen.kv k WHERE k.ns = p_ns AND k.key = u.x
                                              AND (k.expires_at IS NULL OR k.expires_at > now()))),
                        '[]'::jsonb),
    'truncated', v_truncated);
END $$;

-- The smallest string above every string that starts with p (byte order
-- equals code point order in UTF-8); NULL when there is none.
CREATE OR REPLACE FUNCTION queen.kv_prefix_end(p text) RETURNS text
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
  c integer;
BEGIN
  WHILE p <> '' LOOP
    c := ascii(right(p, 1));
    p := left(p, -1);
    IF c < 1114111 THEN
      c := c + 1;
      IF c BETWEEN 55296 AND 57343 THEN  -- skip the surrogate range
        c := 57344;
      END IF;
      RETURN p || chr(c);
    END IF;
  END LOOP;
  RETURN NULL;
END $$;

-- One keyset page of the live keys that start with p_prefix (a byte range,
-- never LIKE), strictly after p_after. truncated is exact: one row beyond
-- the page is read to know.
CREATE OR REPLACE FUNCTION queen.kv_get_prefix(
  p_ns text, p_prefix text, p_after text, p_limit integer, p_keys_only boolean, p_max_bytes bigint)
RETURNS jsonb
-- PL/pgSQL so the plan is cached (a SQL-language function called on its own
-- is planned again on every call).
LANGUAGE plpgsql STABLE SET plan_cache_mode = force_generic_plan AS $$
BEGIN
  RETURN (
  -- One index range scan of at most limit + 1 rows; the running byte sum
  -- decides where the page stops (at least one row when one exists). Both
  -- bounds are plain comparisons so they are index conditions even in a
  -- generic plan (an `p_after IS NULL OR ...` would turn the lower bound
  -- into a filter and make a page cost grow with its distance from the
  -- start of the prefix). No key (at most 512 bytes) reaches 129 U+10FFFF.
  WITH lim AS (SELECT least(greatest(coalesce(p_limit, 100), 1), 1000) AS n),
  scan AS (
    SELECT k, row_number() OVER (ORDER BY k.key) AS rn,
           sum(CASE WHEN p_keys_only THEN octet_length(k.key) ELSE octet_length(k.value::text) END)
             OVER (ORDER BY k.key) AS bytes
      FROM queen.kv k
     WHERE k.ns = p_ns
       AND k.key >= p_prefix
       AND k.key > coalesce(p_after, '')
       AND k.key < coalesce(queen.kv_prefix_end(p_prefix), repeat(chr(1114111), 129))
       AND (k.expires_at IS NULL OR k.expires_at > now())
     ORDER BY k.key
     LIMIT (SELECT n + 1 FROM lim)
  ),
  page AS (
    SELECT s.* FROM scan s, lim WHERE s.rn <= lim.n AND (s.rn = 1 OR s.bytes <= p_max_bytes)
  )
  SELECT jsonb_build_object(
    'rows', coalesce((SELECT jsonb_agg(queen.kv_row_json(p.k, NOT p_keys_only) ORDER BY p.rn) FROM page p), '[]'::jsonb),
    'truncated', (SELECT count(*) FROM scan) > (SELECT count(*) FROM page),
    'nextAfter', CASE WHEN (SELECT count(*) FROM scan) > (SELECT count(*) FROM page)
                      THEN (SELECT (p.k).key FROM page p ORDER BY p.rn DESC LIMIT 1) END));
END $$;

-- Every write of a key first takes a transaction-scoped advisory lock on
-- the key, then draws its version. Writers of one key therefore draw in
-- commit order, so a key's versions only rise, even across delete and
-- re-create (an INSERT that drew its version before waiting on a
-- conflicting writer could otherwise land below a version the key already
-- had; lock tokens rely on versions rising). Writes are applied in key byte
-- order, so these locks are taken in one global order too.
CREATE OR REPLACE FUNCTION queen.kv_lock(p_ns text, p_key text) RETURNS void
LANGUAGE sql AS $$
  SELECT pg_advisory_xact_lock(hashtextextended(p_ns || E'\x1f' || p_key, 7242))
$$;

-- put: no expect is an unconditional upsert that replaces value and expiry;
-- expect 0 means "must not exist" and wins over an expired row; expect N > 0
-- is a pure update that creates nothing.
CREATE OR REPLACE FUNCTION queen.kv_put(
  p_ns text, p_key text, p_value jsonb, p_ttl_seconds bigint, p_forever boolean, p_expect bigint)
RETURNS jsonb
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $$
DECLARE
  v_expires timestamptz := queen.kv_expiry(p_ttl_seconds, p_forever);
  v_version bigint;
  k queen.kv;
BEGIN
  PERFORM queen.kv_lock(p_ns, p_key);
  IF p_expect IS NULL OR p_expect = 0 THEN
    -- expect 0: the update applies only over an expired row; a live row
    -- refuses it and answers what a reader sees now (the winner).
    INSERT INTO queen.kv AS t (ns, key, value, version, expires_at, updated_at)
    VALUES (p_ns, p_key, p_value, nextval('queen.kv_version_seq'), v_expires, now())
    ON CONFLICT (ns, key) DO UPDATE
      SET value = EXCLUDED.value, version = EXCLUDED.version,
          expires_at = EXCLUDED.expires_at, updated_at = EXCLUDED.updated_at
      WHERE p_expect IS NULL OR (t.expires_at IS NOT NULL AND t.expires_at <= now())
    RETURNING t.version INTO v_version;
    IF v_version IS NULL THEN
      RETURN queen.kv_refused(p_key, 'exists', queen.kv_live(p_ns, p_key));
    END IF;
  ELSE
    UPDATE queen.kv AS t
       SET value = p_value, version = nextval('queen.kv_version_seq'), expires_at = v_expires, updated_at = now()
     WHERE t.ns = p_ns AND t.key = p_key AND t.version = p_expect
       AND (t.expires_at IS NULL OR t.expires_at > now())
    RETURNING t.version INTO v_version;
    IF v_version IS NULL THEN
      k := queen.kv_live(p_ns, p_key);
      RETURN queen.kv_refused(p_key, CASE WHEN k.version IS NULL THEN 'absent' ELSE 'version' END, k);
    END IF;
  END IF;
  RETURN jsonb_build_object('applied', true, 'key', p_key, 'value', p_value, 'version', v_version);
END $$;

CREATE OR REPLACE FUNCTION queen.kv_put_if_absent(
  p_ns text, p_key text, p_value jsonb, p_ttl_seconds bigint, p_forever boolean)
RETURNS jsonb
LANGUAGE sql AS $$
  SELECT queen.kv_put(p_ns, p_key, p_value, p_ttl_seconds, p_forever, 0)
$$;

-- delete: of a live row only; expect N > 0 must match its version. expect 0
-- ("must not exist") is a legal expect that can never delete anything: a
-- live key answers exists, an absent one absent.
CREATE OR REPLACE FUNCTION queen.kv_delete(p_ns text, p_key text, p_expect bigint) RETURNS jsonb
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $$
DECLARE
  k queen.kv;
BEGIN
  IF p_expect = 0 THEN
    SELECT * INTO k FROM queen.kv t
     WHERE t.ns = p_ns AND t.key = p_key AND (t.expires_at IS NULL OR t.expires_at > now())
     FOR SHARE;
    RETURN queen.kv_refused(p_key, CASE WHEN k.version IS NULL THEN 'absent' ELSE 'exists' END, k);
  END IF;
  DELETE FROM queen.kv t
   WHERE t.ns = p_ns AND t.key = p_key AND (p_expect IS NULL OR t.version = p_expect)
     AND (t.expires_at IS NULL OR t.expires_at > now())
  RETURNING t.* INTO k;
  IF k.version IS NOT NULL THEN
    RETURN jsonb_build_object('applied', true, 'key', p_key, 'value', k.value, 'version', k.version);
  END IF;
  k := queen.kv_live(p_ns, p_key);
  RETURN queen.kv_refused(p_key, CASE WHEN k.version IS NULL THEN 'absent' ELSE 'version' END, k);
END $$;

-- check: writes nothing. A held check keeps the row share-locked until the
-- call commits, so a guard stays true for the rest of its transaction.
CREATE OR REPLACE FUNCTION queen.kv_check(p_ns text, p_key text, p_expect bigint) RETURNS jsonb
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $$
DECLARE
  k queen.kv;
BEGIN
  IF p_expect IS NULL OR p_expect < 0 THEN
    PERFORM queen.kv_reject('kv_bad_expect', 'check needs expect, an integer >= 0');
  END IF;
  SELECT * INTO k FROM queen.kv t
   WHERE t.ns = p_ns AND t.key = p_key AND (t.expires_at IS NULL OR t.expires_at > now())
   FOR SHARE;
  IF p_expect = 0 THEN
    IF k.version IS NULL THEN
      RETURN jsonb_build_object('applied', true, 'key', p_key, 'version', 0);
    END IF;
    RETURN queen.kv_refused(p_key, 'exists', k);
  END IF;
  IF k.version IS NULL THEN
    RETURN queen.kv_refused(p_key, 'absent', k);
  ELSIF k.version <> p_expect THEN
    RETURN queen.kv_refused(p_key, 'version', k);
  END IF;
  RETURN jsonb_build_object('applied', true, 'key', p_key, 'version', k.version);
END $$;

-- incr: numeric server side, so nothing overflows. Absent or expired counts
-- as 0 and takes the expiry the call carries; a live row keeps the expiry it
-- was born with. min/max refuse (also on the create branch) and write
-- nothing. The type guard looks at the live row only.
CREATE OR REPLACE FUNCTION queen.kv_incr(
  p_ns text, p_key text, p_delta numeric, p_min numeric, p_max numeric,
  p_ttl_seconds bigint, p_forever boolean)
RETURNS jsonb
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $$
DECLARE
  v_expires timestamptz := queen.kv_expiry(p_ttl_seconds, p_forever);
  k queen.kv;
  v_live boolean;
  v_current numeric;
  v_next numeric;
  v_version bigint;
  v_attempt integer := 0;
BEGIN
  IF p_delta IS NULL OR p_delta <> trunc(p_delta) THEN
    PERFORM queen.kv_reject('kv_bad_body', 'delta must be an integer');
  END IF;
  PERFORM queen.kv_lock(p_ns, p_key);
  LOOP
    v_attempt := v_attempt + 1;
    SELECT * INTO k FROM queen.kv t WHERE t.ns = p_ns AND t.key = p_key FOR UPDATE;
    v_live := k.version IS NOT NULL AND (k.expires_at IS NULL OR k.expires_at > now());
    IF v_live THEN
      IF jsonb_typeof(k.value) <> 'number' OR (k.value #>> '{}')::numeric <> trunc((k.value #>> '{}')::numeric) THEN
        RETURN queen.kv_refused(p_key, 'type', k);
      END IF;
      v_current := (k.value #>> '{}')::numeric;
    ELSE
      v_current := 0;
    END IF;
    v_next := v_current + p_delta;
    IF (p_max IS NOT NULL AND v_next > p_max) OR (p_min IS NOT NULL AND v_next < p_min) THEN
      RETURN jsonb_build_object('applied', false, 'reason', 'limit', 'key', p_key,
        'value', to_jsonb(v_current), 'version', CASE WHEN v_live THEN k.version ELSE 0 END);
    END IF;
    IF v_live THEN
      UPDATE queen.kv t SET value = to_jsonb(v_next), version = nextval('queen.kv_version_seq'), updated_at = now()
       WHERE t.ns = p_ns AND t.key = p_key
      RETURNING t.version INTO v_version;
    ELSIF k.version IS NOT NULL THEN
      -- An expired row we hold locked: a fresh lineage.
      UPDATE queen.kv t SET value = to_jsonb(v_next), version = nextval('queen.kv_version_seq'),
             expires_at = v_expires, updated_at = now()
       WHERE t.ns = p_ns AND t.key = p_key
      RETURNING t.version INTO v_version;
    ELSE
      INSERT INTO queen.kv AS t (ns, key, value, version, expires_at, updated_at)
      VALUES (p_ns, p_key, to_jsonb(v_next), nextval('queen.kv_version_seq'), v_expires, now())
      ON CONFLICT (ns, key) DO NOTHING
      RETURNING t.version INTO v_version;
    END IF;
    IF v_version IS NOT NULL THEN
      RETURN jsonb_build_object('applied', true, 'key', p_key, 'value', to_jsonb(v_next), 'version', v_version);
    END IF;
    -- Another call created the key between our read and our insert: we hold
    -- its row now, read it again.
    IF v_attempt >= 3 THEN
      RAISE EXCEPTION USING ERRCODE = '40001', MESSAGE = 'kv incr kept racing a concurrent create';
    END IF;
  END LOOP;
END $$;
