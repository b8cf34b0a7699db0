-- Locks and semaphores. A permit is a KV row: namespace 'queen-locks', key
-- '<name>#<slot>', value {"owner", "since"}, and its version is the token.
-- Versions come from the one KV sequence under the key's lock, so a later
-- holder always has a higher token (a fencing token), and the guard a holder
-- puts in a transaction bundle is a plain KV check of that version.
--
-- The request is checked in Rust (locks.rs). Here: which slot is free,
-- expiry against the database clock, tokens and owners.
--
-- Locking: an acquire or renew first takes the name's lock (an advisory
-- lock in a key space of its own, so no KV call ever takes it), then the
-- slot's KV key lock (queen.kv_lock) before it draws a version. One call
-- applies its ops in name order, so two calls never wait on each other's
-- names in opposite orders.

-- The live permits of a name, in slot order.
CREATE OR REPLACE FUNCTION queen.lock_permits(p_name text)
RETURNS TABLE (slot integer, owner text, token bigint, since text, expires_at timestamptz, renewed_at timestamptz)
LANGUAGE sql STABLE AS $$
  SELECT substr(k.key, length(p_name) + 2)::integer, k.value->>'owner', k.version, k.value->>'since',
         k.expires_at, k.updated_at
    FROM queen.kv k
   WHERE k.ns = 'queen-locks'
     AND k.key >= p_name || '#' AND k.key < p_name || '$'
     AND substr(k.key, length(p_name) + 2) ~ '^(0|[1-9][0-9]{0,3})$'
     AND (k.expires_at IS NULL OR k.expires_at > now())
   ORDER BY 1
$$;

CREATE OR REPLACE FUNCTION queen.lock_holders(p_name text) RETURNS jsonb
LANGUAGE sql STABLE AS $$
  SELECT coalesce(jsonb_agg(jsonb_build_object(
           'slot', p.slot, 'owner', p.owner, 'token', p.token, 'since', p.since,
           'expiresAt', queen.iso(p.expires_at), 'renewedAt', queen.iso(p.renewed_at)) ORDER BY p.slot),
         '[]'::jsonb)
    FROM queen.lock_permits(p_name) p
$$;

-- What a holder keeps: its slot, token and the guard for transaction bundles.
CREATE OR REPLACE FUNCTION queen.lock_grant(p_name text, p_slot integer, p_token bigint, p_owner text,
                                            p_expires timestamptz)
RETURNS jsonb
LANGUAGE sql STABLE AS $$
  SELECT jsonb_build_object('slot', p_slot, 'token', p_token, 'owner', p_owner,
           'expiresAt', queen.iso(p_expires),
           'guard', jsonb_build_object('op', 'check', 'ns', 'queen-locks', 'key', p_name || '#' || p_slot,
                                       'expect', p_token, 'required', true))
$$;

CREATE OR REPLACE FUNCTION queen.lock_name_lock(p_name text) RETURNS void
LANGUAGE sql AS $$
  SELECT pg_advisory_xact_lock(hashtextextended('queen-locks' || E'\x1e' || p_name, 7243))
$$;

-- acquire: the same owner again gets its permit back (already: true, same
-- token); otherwise the lowest free slot below p_limit. A row written into
-- that slot by a KV call since the slots were read answers 'contended'.
CREATE OR REPLACE FUNCTION queen.lock_acquire(p_name text, p_owner text, p_ttl bigint, p_limit integer)
RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
  v_mine record;
  v_taken integer[];
  v_slot integer;
  v_key text;
  v_version bigint;
  v_expires timestamptz;
BEGIN
  PERFORM queen.lock_name_lock(p_name);
  SELECT * INTO v_mine FROM queen.lock_permits(p_name) p
   WHERE p.owner = p_owner AND p.slot < p_limit
   ORDER BY p.slot LIMIT 1;
  IF FOUND THEN
    RETURN jsonb_build_object('acquired', true, 'already', true)
        || queen.lock_grant(p_name, v_mine.slot, v_mine.token, p_owner, v_mine.expires_at);
  END IF;
  SELECT coalesce(array_agg(p.slot), '{}') INTO v_taken FROM queen.lock_permits(p_name) p;
  SELECT min(s) INTO v_slot FROM generate_series(0, p_limit - 1) s WHERE s <> ALL (v_taken);
  IF v_slot IS NULL THEN
    RETURN jsonb_build_object('acquired', false, 'reason', 'held', 'holders', queen.lock_holders(p_name));
  END IF;
  v_key := p_name || '#' || v_slot;
  v_expires := now() + make_interval(secs => p_ttl);
  PERFORM queen.kv_lock('queen-locks', v_key);
  INSERT INTO queen.kv AS t (ns, key, value, version, expires_at, updated_at)
  VALUES ('queen-locks', v_key, jsonb_build_object('owner', p_owner, 'since', queen.iso(now())),
          nextval('queen.kv_version_seq'), v_expires, now())
  ON CONFLICT (ns, key) DO UPDATE
    SET value = EXCLUDED.value, version = EXCLUDED.version,
        expires_at = EXCLUDED.expires_at, updated_at = EXCLUDED.updated_at
    WHERE t.expires_at IS NOT NULL AND t.expires_at <= now()
  RETURNING t.version INTO v_version;
  IF v_version IS NULL THEN
    RETURN jsonb_build_object('acquired', false, 'reason', 'contended', 'holders', queen.lock_holders(p_name));
  END IF;
  RETURN jsonb_build_object('acquired', true)
      || queen.lock_grant(p_name, v_slot, v_version, p_owner, v_expires);
END $$;

-- renew: the permit named by its token, or (sent again with an older token)
-- by its owner; a new token and a new expiry. An owner that is not the
-- permit's never renews it.
CREATE OR REPLACE FUNCTION queen.lock_renew(p_name text, p_token bigint, p_ttl bigint, p_slot integer,
                                            p_owner text)
RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
  v_permit record;
  v_key text;
  v_version bigint;
  v_expires timestamptz;
BEGIN
  PERFORM queen.lock_name_lock(p_name);
  SELECT * INTO v_permit FROM queen.lock_permits(p_name) p
   WHERE (p_slot IS NULL OR p.slot = p_slot)
     AND (p.token = p_token OR (p_owner IS NOT NULL AND p.owner = p_owner))
     AND (p_owner IS NULL OR p.owner = p_owner)
   ORDER BY (p.token = p_token) DESC, p.slot
   LIMIT 1;
  IF NOT FOUND THEN
    RETURN jsonb_build_object('renewed', false, 'reason', 'lost', 'holders', queen.lock_holders(p_name));
  END IF;
  v_key := p_name || '#' || v_permit.slot;
  v_expires := now() + make_interval(secs => p_ttl);
  PERFORM queen.kv_lock('queen-locks', v_key);
  UPDATE queen.kv t
     SET version = nextval('queen.kv_version_seq'), expires_at = v_expires, updated_at = now()
   WHERE t.ns = 'queen-locks' AND t.key = v_key AND t.version = v_permit.token
  RETURNING t.version INTO v_version;
  IF v_version IS NULL THEN
    RETURN jsonb_build_object('renewed', false, 'reason', 'lost', 'holders', queen.lock_holders(p_name));
  END IF;
  RETURN jsonb_build_object('renewed', true)
      || queen.lock_grant(p_name, v_permit.slot, v_version, v_permit.owner, v_expires);
END $$;

-- release: only the holder of the token gives the permit back.
CREATE OR REPLACE FUNCTION queen.lock_release(p_name text, p_token bigint, p_slot integer)
RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
  v_slot integer;
BEGIN
  SELECT p.slot INTO v_slot FROM queen.lock_permits(p_name) p
   WHERE p.token = p_token AND (p_slot IS NULL OR p.slot = p_slot);
  IF FOUND THEN
    DELETE FROM queen.kv t
     WHERE t.ns = 'queen-locks' AND t.key = p_name || '#' || v_slot AND t.version = p_token;
    IF FOUND THEN
      RETURN jsonb_build_object('released', true, 'slot', v_slot);
    END IF;
  END IF;
  RETURN jsonb_build_object('released', false, 'reason', 'lost');
END $$;

-- One locks call: ops applied in (name, index) order; answers each op's
-- outcome in index order (queen_wire::LockResult's fields after `name`: the
-- engine names each and writes the answer).
CREATE OR REPLACE FUNCTION queen.lock_apply(
  p_ops text[], p_names text[], p_owners text[], p_ttls bigint[], p_limits integer[],
  p_tokens bigint[], p_slots integer[])
RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
  i integer;
  v_results jsonb[] := array_fill(NULL::jsonb, ARRAY[coalesce(array_length(p_ops, 1), 0)]);
  v_answer jsonb;
  v_holders jsonb;
BEGIN
  FOR i IN SELECT n FROM generate_subscripts(p_ops, 1) n ORDER BY p_names[n], n LOOP
    CASE p_ops[i]
      WHEN 'acquire' THEN
        v_answer := queen.lock_acquire(p_names[i], coalesce(p_owners[i], gen_random_uuid()::text),
                                       p_ttls[i], p_limits[i]);
      WHEN 'renew' THEN
        v_answer := queen.lock_renew(p_names[i], p_tokens[i], p_ttls[i], p_slots[i], p_owners[i]);
      WHEN 'release' THEN
        v_answer := queen.lock_release(p_names[i], p_tokens[i], p_slots[i]);
      ELSE
        v_holders := queen.lock_holders(p_names[i]);
        v_answer := jsonb_build_object('held', jsonb_array_length(v_holders) > 0, 'holders', v_holders);
    END CASE;
    v_results[i] := v_answer;
  END LOOP;
  RETURN to_jsonb(v_results)::text;
END $$;
