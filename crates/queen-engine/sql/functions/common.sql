-- Plan caching: the hot PL/pgSQL functions carry
-- `SET plan_cache_mode = force_generic_plan`. Their statements take arrays
-- and variables whose custom plans the planner judged cheaper than the
-- generic one, so it re-planned every statement on every call (a third of
-- a push's backend CPU in perf); the generic plans are the index plans the
-- statements were written for.
--
-- Shared helpers. Every rule that refuses input raises one of two SQLSTATEs
-- whose MESSAGE is the JSON body to answer with; the Rust side never edits it:
--   QN400 bad request (HTTP 400), QN413 too large (HTTP 413).
-- A business refusal that must roll the call back (HTTP 200) raises its
-- facts instead, and the engine writes the body:
--   QN201 a lost `required` KV precondition (queen.kv_lost),
--   QN202 a refused transaction ({"ackRefused": ..} or {"pushRefused": ..}),
--   QN203 a refused or replayed stream cycle (queen.stream_refuse).

-- The consumer group of queue mode, as the wire names it. Its one spelling
-- is queen_wire::QUEUE_MODE: migrate.rs writes it over the placeholder.
-- IMMUTABLE, so a statement that compares with it plans it as a constant.
CREATE OR REPLACE FUNCTION queen.queue_mode() RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT text '{{QUEUE_MODE}}'
$$;

-- One fixed-width UTC format everywhere: clients compare timestamps as strings.
CREATE OR REPLACE FUNCTION queen.iso(t timestamptz) RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE AS $$
  SELECT to_char(t AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')
$$;

-- A broker 400: `field` is the JSON path of the offending input.
CREATE OR REPLACE FUNCTION queen.bad_request(field text, problem text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION USING ERRCODE = 'QN400', MESSAGE = json_build_object(
    'error', field || ' ' || problem,
    'code', 'bad_request',
    'field', field,
    'detail', field || ' ' || problem)::text;
END $$;

-- Reads an optional non-negative integer field, refusing anything else.
CREATE OR REPLACE FUNCTION queen.json_int(obj json, key text, path text, min_value bigint DEFAULT 0)
RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
  v json := obj -> key;
  t text := json_typeof(obj -> key);
BEGIN
  IF v IS NULL OR t = 'null' THEN
    RETURN NULL;
  END IF;
  IF t <> 'number' OR (v #>> '{}') !~ '^-?[0-9]+$' OR length(v #>> '{}') > 18 THEN
    PERFORM queen.bad_request(path || key, 'must be an integer');
  END IF;
  IF (v #>> '{}')::bigint < min_value THEN
    PERFORM queen.bad_request(path || key, 'must be at least ' || min_value);
  END IF;
  RETURN (v #>> '{}')::bigint;
END $$;

CREATE OR REPLACE FUNCTION queen.json_bool(obj json, key text, path text) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
  t text := json_typeof(obj -> key);
BEGIN
  IF t IS NULL OR t = 'null' THEN
    RETURN NULL;
  END IF;
  IF t <> 'boolean' THEN
    PERFORM queen.bad_request(path || key, 'must be a boolean');
  END IF;
  RETURN (obj ->> key)::boolean;
END $$;

-- Reads an optional string field; `required` refuses absence and ''.
CREATE OR REPLACE FUNCTION queen.json_text(obj json, key text, path text, required boolean DEFAULT false)
RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
  t text := json_typeof(obj -> key);
BEGIN
  IF t IS NULL OR t = 'null' THEN
    IF required THEN
      PERFORM queen.bad_request(path || key, 'is required');
    END IF;
    RETURN NULL;
  END IF;
  IF t <> 'string' THEN
    PERFORM queen.bad_request(path || key, 'must be a string');
  END IF;
  IF required AND obj ->> key = '' THEN
    PERFORM queen.bad_request(path || key, 'must not be empty');
  END IF;
  RETURN obj ->> key;
END $$;

-- Time-ordered UUIDs (v7 layout), replacing the SQL-language definition of
-- migration 0001: a SQL function that cannot be inlined is parsed and
-- planned again in every statement that calls it, which was a fifth of a
-- push's cost; a PL/pgSQL body keeps its cached expression.
CREATE OR REPLACE FUNCTION queen.uuid_v7() RETURNS uuid
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
  RETURN encode(
    set_bit(set_bit(
      overlay(uuid_send(gen_random_uuid())
              PLACING substring(int8send((extract(epoch FROM clock_timestamp()) * 1000)::bigint) FROM 3)
              FROM 1 FOR 6),
      52, 1), 53, 1), 'hex')::uuid;
END $$;

-- A lease id: the queue's id in its first 48 bits, then the random bits of
-- a v4 UUID (74 of them, with its version and variant). Extending a lease
-- finds its cursors through the queue (queen.extend_lease), so no index on
-- cursors.lease_id is needed and leasing stays a HOT update (migration
-- 0017). The random bits keep a stale or foreign lease from matching.
CREATE OR REPLACE FUNCTION queen.lease_id_for(p_queue_id bigint) RETURNS uuid
LANGUAGE sql VOLATILE AS $$
  SELECT encode(overlay(uuid_send(gen_random_uuid()) PLACING substring(int8send(p_queue_id) FROM 3)
                        FROM 1 FOR 6), 'hex')::uuid
$$;

-- The queue id a lease id names (see queen.lease_id_for).
CREATE OR REPLACE FUNCTION queen.lease_queue_id(p_lease uuid) RETURNS bigint
LANGUAGE sql IMMUTABLE AS $$
  SELECT ('x0000' || left(replace(p_lease::text, '-', ''), 12))::bit(64)::bigint
$$;

-- A message id from a partition's id clock (see migration 0008): the
-- clock's 48 milliseconds, the version nibble 7, its 12-bit counter, then
-- 64 random bits with the RFC 9562 variant. Ids of one partition rise with
-- the clock; the random half keeps ids of different partitions apart.
CREATE OR REPLACE FUNCTION queen.message_id(clock bigint) RETURNS uuid
LANGUAGE sql VOLATILE AS $$
  SELECT encode(int8send(((clock >> 12) << 16) | 28672 | (clock & 4095))
                || substring(uuid_send(gen_random_uuid()) FROM 9), 'hex')::uuid
$$;

-- The same with the random half given (the engine draws it, variant bits
-- set); NULL draws it here.
CREATE OR REPLACE FUNCTION queen.message_id(clock bigint, tail bigint) RETURNS uuid
LANGUAGE sql VOLATILE AS $$
  SELECT CASE WHEN tail IS NULL THEN queen.message_id(clock)
         ELSE encode(int8send(((clock >> 12) << 16) | 28672 | (clock & 4095)) || int8send(tail), 'hex')::uuid END
$$;

-- The first id clock value of a push at `at` to a partition whose clock is
-- `last`: the push's millisecond, or one past the last value when that is
-- later (a busy millisecond, or a clock that stepped back). date_part's
-- float8 (exact to the microsecond for this century), not extract's numeric:
-- this runs on every push.
CREATE OR REPLACE FUNCTION queen.id_clock_start(at timestamptz, last bigint) RETURNS bigint
LANGUAGE sql STABLE AS $$
  SELECT greatest(floor(date_part('epoch', at) * 1000)::bigint << 12, last + 1)
$$;

-- Encryption at rest: the engine seals a payload of an encrypted queue as
-- {"\u0000sealed":"v1.<base64>"} (crates/queen-engine/src/sealing.rs). No
-- client payload can hold a \u0000 escape (the push decoder refuses it), so
-- this prefix marks our envelopes only.
CREATE OR REPLACE FUNCTION queen.is_sealed(payload text) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT coalesce(left(payload, 20) = '{"\u0000sealed":"v1.', false)
$$;

-- Sealed with the key whose fingerprint is p_key_id (the envelope's next
-- field: {"\u0000sealed":"v1.<key id>.<base64>"}).
CREATE OR REPLACE FUNCTION queen.sealed_with(payload text, p_key_id text) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT coalesce(left(payload, 29) = '{"\u0000sealed":"v1.' || p_key_id || '.', false)
$$;

-- A broker whose key is not the queue's (or who has none) may not push to
-- or pop from an encrypted queue: what it wrote or took no one could read.
CREATE OR REPLACE FUNCTION queen.encryption_key_mismatch(p_queue text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION USING ERRCODE = 'QN500', MESSAGE =
    'queue ' || p_queue || ' is encrypted at rest with another key than this broker''s QUEEN_ENCRYPTION_KEY (or this broker has none)';
END $$;

-- An item bound for an encrypted queue arrived unsealed: the engine's view
-- of which queues are encrypted is stale. QN409 names the queues; the engine
-- refreshes its view and sends the call again.
CREATE OR REPLACE FUNCTION queen.encryption_changed(p_queues text[]) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION USING ERRCODE = 'QN409', MESSAGE = json_build_object(
    'error', 'encryption_changed', 'queues', p_queues)::text;
END $$;
