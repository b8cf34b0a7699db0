-- The consumer-group calls (delete, subscription, seek) answer counts and
-- times; the engine writes their answers (queen_wire::GroupDeleted,
-- SubscriptionUpdated, Seeked, PartitionSeeked). Dropped here, created
-- again from groups.sql.
DROP FUNCTION IF EXISTS queen.delete_consumer_group(text, text, boolean);
DROP FUNCTION IF EXISTS queen.update_subscription(text, text);
DROP FUNCTION IF EXISTS queen.seek(text, text, boolean, text, text);
-- A queue's deletion answers whether it existed (queen_wire::QueueDeleted).
DROP FUNCTION IF EXISTS queen.delete_queue(text);
-- A timer's peek and a page of timers answer typed rows (queen.timer_rows);
-- the engine writes both answers.
DROP FUNCTION IF EXISTS queen.timer_peek(text, text);
DROP FUNCTION IF EXISTS queen.timer_list(text, text, integer);
DROP FUNCTION IF EXISTS queen.timer_json(queen.timers);
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
