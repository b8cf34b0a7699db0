-- The engine writes every KV element, every lost-precondition body and a
-- transaction's whole answer: SQL reports a lost precondition with
-- queen.kv_lost (SQLSTATE QN201) and a bundle's outcome with
-- queen.tx_record. The SQL writers of those bodies go.
DROP FUNCTION IF EXISTS queen.kv_precondition_refusal(text, bigint, text, jsonb);
DROP FUNCTION IF EXISTS queen.tx_kv_result(integer, text, jsonb);
DROP FUNCTION IF EXISTS queen.tx_answer(text, jsonb);
DROP FUNCTION IF EXISTS queen.tx_ack_result(integer, text, boolean);
