-- The scheduling token's `sub` (JWT auth), stamped on the message a timer
-- fires as a push stamps producer_sub; NULL without auth.
ALTER TABLE queen.timers ADD COLUMN producer_sub text;
-- A group subscribed from a time still to come reads, on a lane created
-- before that time, only messages created at or after it: the pop skips
-- the lane's older head (queen.held_start) until the time has passed.
ALTER TABLE queen.cursors ADD COLUMN hold_until timestamptz;
