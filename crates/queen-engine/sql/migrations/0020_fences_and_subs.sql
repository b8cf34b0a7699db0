-- The scheduling token's `sub` (JWT auth), stamped on the message a timer
-- fires as a push stamps producer_sub; NULL without auth.
ALTER TABLE queen.timers ADD COLUMN producer_sub text;
-- A group subscribed from a time still to come reads, on a lane created
-- before that time, only messages created at or after it: the pop skips
-- the lane's older head (queen.held_start) until the time has passed.
ALTER TABLE queen.cursors ADD COLUMN hold_until timestamptz;
-- Ephemeral ownership is fenced by an epoch: a takeover bumps it, and an
-- owner renews only the (queue, epoch) pairs it holds, so a late renewal of
-- an old owner renews nothing (queen.ephemeral_renew).
ALTER TABLE queen.ephemeral_queues ADD COLUMN epoch bigint NOT NULL DEFAULT 1;
