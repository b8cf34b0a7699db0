-- A stream query's registration answers its id and what happened, and a
-- state read its rows; the engine writes both answers (streams.rs).
DROP FUNCTION IF EXISTS queen.stream_register(text, text, text, text, boolean);
DROP FUNCTION IF EXISTS queen.stream_state_get(uuid, uuid, text[], text, numeric);
-- partitions/changed answers typed columns; the engine writes the pages.
DROP FUNCTION IF EXISTS queen.partitions_changed(text[], integer[], text[], uuid[]);
-- Timer ops answer each op's outcome, txn, promised id and due time as
-- typed columns; the engine writes every timer element.
DROP FUNCTION IF EXISTS queen.timer_apply(text[], text[], text[], text[], text[], bigint[], text[], text);
DROP FUNCTION IF EXISTS queen.timer_cancel(text, text, text);
DROP FUNCTION IF EXISTS queen.timer_schedule(text, text, text, text, bigint, text, text);
-- A peek is a key lookup of its own (queen.timer_row), a list a keyset
-- page (queen.timer_page); the one function that served both goes.
DROP FUNCTION IF EXISTS queen.timer_rows(text, text, text, integer);
