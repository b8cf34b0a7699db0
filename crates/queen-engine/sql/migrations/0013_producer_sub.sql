-- The producer's identity, stamped by the broker from the pushing token's
-- `sub` (JWT auth) and never taken from a request body; NULL without auth.
-- A dead letter keeps it, and a retried one takes it back.
ALTER TABLE queen.messages ADD COLUMN producer_sub text;
ALTER TABLE queen.dead_letters ADD COLUMN producer_sub text;
