-- The engine writes every ack answer, every transaction refusal and every
-- stream cycle answer. The ack functions answer each item's verdict, lease
-- release and dead-letter move as typed columns; a refused transaction
-- raises its facts (SQLSTATE QN202). The functions whose answers change
-- shape are dropped here and created again from ack.sql, transaction.sql
-- and streams.sql; the SQL writers of the ack element and of the ack
-- refusal go.
DROP FUNCTION IF EXISTS queen.ack_answer(integer, text, text, boolean, boolean);
DROP FUNCTION IF EXISTS queen.ack_refusal(text, uuid[], text[], text[]);
DROP FUNCTION IF EXISTS queen.ack_rows(text[], uuid[], text[], text[], text[], text[], text, text);
DROP FUNCTION IF EXISTS queen.ack_completion(text, uuid, text, text, text, text);
DROP FUNCTION IF EXISTS queen.ack_completions(text[], uuid[], text[], bigint[], text[], integer[]);
DROP FUNCTION IF EXISTS queen.ack_nacks(text[], uuid[], text[], text[], text[], text[], bigint[]);
DROP FUNCTION IF EXISTS queen.ack_requests(text[], uuid[], text[], text[], text[], text[], integer[]);
DROP FUNCTION IF EXISTS queen.tx_record(text, uuid[], jsonb, jsonb, jsonb);
-- A stream cycle answers what it did as typed columns, and its refusals
-- and late replays raise their facts (SQLSTATE QN203).
DROP FUNCTION IF EXISTS queen.stream_cycle(uuid, uuid, text, text[], text[], text[], text[], text[], text[],
  text[], text[], text[], boolean, text, text, text, integer, boolean, text[]);
-- The dead-letter listings answer ids and totals; the engine writes each
-- dead letter from queen.dead_letter_rows.
DROP FUNCTION IF EXISTS queen.dlq_list(text, text, text, text, text, integer, integer);
DROP FUNCTION IF EXISTS queen.dlq_page(text, bigint, integer);
-- A fetch answers typed columns; the engine writes its answer.
DROP FUNCTION IF EXISTS queen.fetch(text[], text[], bigint[], bigint[], bigint, integer);
