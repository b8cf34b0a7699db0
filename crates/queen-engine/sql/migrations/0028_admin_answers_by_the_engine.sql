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
