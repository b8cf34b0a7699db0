-- A pop answers typed columns (queen.popped: the lanes it claimed and each
-- message's fields in delivery order); the engine writes the pop's answer
-- (queen_wire::PopAnswer). The functions whose answers change shape are
-- dropped here and created again from pop.sql; queen.pop_answer, the SQL
-- writer of the body, goes.
DROP FUNCTION IF EXISTS queen.pop_matching(text, text, text, integer, integer, integer, boolean, text, text, text);
DROP FUNCTION IF EXISTS queen.pop_requests(text[], text[], text[], integer[], integer[], integer[], boolean[],
  text[], text[], text);
DROP FUNCTION IF EXISTS queen.pop_named_batch(text[], text[], text[], integer[], integer[], integer[], boolean[], text);
DROP FUNCTION IF EXISTS queen.pop_api(text, text, text, integer, integer, integer, boolean, text, text, text);
DROP FUNCTION IF EXISTS queen.pop(text, text, text, integer, integer, integer, boolean, text, text);
DROP FUNCTION IF EXISTS queen.pop_lane(queen.queues, uuid, text, integer, uuid, integer, boolean, boolean);
DROP FUNCTION IF EXISTS queen.lane_messages(queen.queues, uuid, text, text, bigint, integer, uuid);
DROP FUNCTION IF EXISTS queen.pop_answer(text, text, uuid, uuid, text, json[], integer);

-- One lane's delivery (queen.pop_lane): its partition's name, the messages'
-- fields as arrays in offset order, their count and the last offset.
CREATE TYPE queen.lane_batch AS (
  partition_name  text,
  ids             uuid[],
  transaction_ids text[],
  trace_ids       text[],
  payloads        text[],
  producer_subs   text[],
  created_ats     text[],
  n               integer,
  last            bigint
);

-- A pop's delivery (queen.pop and its callers): the lanes claimed, in claim
-- order, with how many messages each gave; then every message's fields, the
-- lanes' messages one lane after another. The engine writes the answer.
CREATE TYPE queen.popped AS (
  queue           text,
  lease_id        uuid,
  consumer_group  text,
  lane_ids        uuid[],
  lane_names      text[],
  lane_sizes      integer[],
  ids             uuid[],
  transaction_ids text[],
  trace_ids       text[],
  payloads        text[],
  producer_subs   text[],
  created_ats     text[]
);
