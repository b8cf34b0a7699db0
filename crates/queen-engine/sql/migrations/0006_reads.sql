-- Reads by offset: partitions/changed pages a queue's partitions in
-- creation order (ids are time-ordered) by keyset on id.
CREATE INDEX partitions_queue_created_idx ON queen.partitions (queue_id, id);
