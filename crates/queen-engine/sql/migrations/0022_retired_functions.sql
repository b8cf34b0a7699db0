-- Functions earlier versions defined and this one no longer has (an
-- entry point now checked in Rust, a signature that gained a parameter):
-- dropped once here, so the function files only define what exists.
-- Signatures that changed must go before the function files re-create
-- them (migrations run first, in the same transaction).

-- Formerly in sql/functions/0002_queues.sql.
DROP FUNCTION IF EXISTS queen.configure(json);

-- Formerly in sql/functions/0003_push.sql.
DROP FUNCTION IF EXISTS queen.push_api(json);
DROP FUNCTION IF EXISTS queen.push(json);
DROP FUNCTION IF EXISTS queen.push_rows(text[], text[], text[], text[], text[]);
DROP FUNCTION IF EXISTS queen.push_rows(text[], text[], text[], text[], text[], integer[]);
DROP FUNCTION IF EXISTS queen.push_rows(text[], text[], text[], text[], text[], integer[], uuid[]);
DROP FUNCTION IF EXISTS queen.push_rows(text[], text[], text[], text[], text[], integer[], uuid[], boolean);
DROP FUNCTION IF EXISTS queen.push_rows(text[], text[], text[], text[], text[], integer[], uuid[], boolean, text[]);

-- Formerly in sql/functions/0004_pop.sql.
DROP FUNCTION IF EXISTS queen.pop_lane(queen.queues, uuid, text, integer, uuid, integer, boolean);
DROP FUNCTION IF EXISTS queen.pop_api(text, text, text, integer, integer, integer, boolean, text, text);

-- Formerly in sql/functions/0005_ack.sql.
DROP FUNCTION IF EXISTS queen.ack(json, text, text, text);
DROP FUNCTION IF EXISTS queen.ack_verdicts(text[], uuid[], text[], text[], text[], text);
DROP FUNCTION IF EXISTS queen.ack_refusal(text, uuid[], text[], text[]);

-- Formerly in sql/functions/0006_groups.sql.
DROP FUNCTION IF EXISTS queen.seek(text, text, boolean, text);

-- Formerly in sql/functions/0008_kv_batch.sql.
DROP FUNCTION IF EXISTS queen.kv_batch(json, jsonb);
DROP FUNCTION IF EXISTS queen.kv_key_arg(json, text);
DROP FUNCTION IF EXISTS queen.kv_int_arg(json, text, text);
DROP FUNCTION IF EXISTS queen.kv_write_rows(
  text[], text[], text[], jsonb[], bigint[], boolean[], bigint[], numeric[], numeric[], numeric[]);

-- Formerly in sql/functions/0009_transaction.sql.
DROP FUNCTION IF EXISTS queen.transaction(json, text);
DROP FUNCTION IF EXISTS queen.transaction(json, text, bigint);
DROP FUNCTION IF EXISTS queen.transaction_rows(text, text, bigint, integer, integer[], text[], text[], text[],
  text[], text[], integer[], text[], uuid[], text[], text[], text[], text[], text[], text[], text[], jsonb[],
  bigint[], boolean[], bigint[], boolean[], numeric[], numeric[], numeric[], jsonb[], text[], text[],
  integer[], boolean[]);
DROP FUNCTION IF EXISTS queen.transaction_rows(text, text, bigint, integer, integer[], text[], text[], text[],
  text[], text[], integer[], text[], uuid[], text[], text[], text[], text[], text[], text[], text[], jsonb[],
  bigint[], boolean[], bigint[], boolean[], numeric[], numeric[], numeric[], jsonb[], text[], text[],
  integer[], boolean[], text[], text[], text[], text[], text[], bigint[], text[]);
DROP FUNCTION IF EXISTS queen.transaction_rows(text, text, bigint, integer, integer[], text[], text[], text[],
  text[], text[], integer[], text[], uuid[], text[], text[], text[], text[], text[], text[], text[], jsonb[],
  bigint[], boolean[], bigint[], boolean[], numeric[], numeric[], numeric[], jsonb[], text[], text[],
  integer[], boolean[], text[], text[], text[], text[], text[], bigint[], text[], text[]);
DROP FUNCTION IF EXISTS queen.transaction_requests(text[], text[], bigint, integer[], integer[], integer[],
  integer[], text[], uuid[], text[], text[], text[], text[],
  text[], text[], text[], jsonb[], bigint[], boolean[], bigint[], boolean[], numeric[], numeric[], numeric[],
  jsonb[], text[], text[], integer[], boolean[]);
DROP FUNCTION IF EXISTS queen.transaction_requests(text[], text[], bigint, integer[], integer[], integer[],
  integer[], integer[], integer[], text[], uuid[], text[], text[], text[], text[], text[], text[], text[],
  jsonb[], bigint[], boolean[], bigint[], boolean[], numeric[], numeric[], numeric[], jsonb[], text[], text[],
  integer[], boolean[]);

-- Formerly in sql/functions/0010_admin.sql.
DROP FUNCTION IF EXISTS queen.resources_queues();
DROP FUNCTION IF EXISTS queen.queues_page(text, integer);
DROP FUNCTION IF EXISTS queen.message_retry(uuid, text);

-- Formerly in sql/functions/0011_observe.sql.
DROP FUNCTION IF EXISTS queen.resources_queue_depth(text);

-- Formerly in sql/functions/0014_timers.sql.
DROP FUNCTION IF EXISTS queen.timer_schedule(text, text, text, text, bigint, text);
DROP FUNCTION IF EXISTS queen.timer_apply(text[], text[], text[], text[], text[], bigint[], text[]);

-- Formerly in sql/functions/0016_streams.sql.
DROP FUNCTION IF EXISTS queen.stream_cycle(uuid, uuid, text, text[], text[], text[], text[], text[], text[],
  text[], text[], boolean, text, text, text, integer, boolean);

-- Formerly in sql/functions/0017_ephemeral.sql.
DROP FUNCTION IF EXISTS queen.ephemeral_claim(text, uuid, text, integer, boolean);
