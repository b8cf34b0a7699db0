-- The scheduling token's `sub` (JWT auth), stamped on the message a timer
-- fires as a push stamps producer_sub; NULL without auth.
ALTER TABLE queen.timers ADD COLUMN producer_sub text;
