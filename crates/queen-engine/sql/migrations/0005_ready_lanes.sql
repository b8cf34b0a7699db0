-- Ready lanes: the index a queue-wide pop searches instead of every cursor
-- of the queue (which made pop cost grow with the number of partitions).
--
-- A row (partition, group) says "this lane may have messages the group has
-- not consumed". It is a hint that may be stale one way only: a lane with
-- unconsumed messages always has a row (a false negative would hide
-- messages), a row whose lane is drained is allowed and is removed by the
-- next pop that visits it (queen.pop, under the locks that make the removal
-- safe). The row also carries the lane's last delivery time, so the pop
-- walks lanes in its fairness order (least recently delivered first)
-- straight from an index and stops after the lanes it claims.
--
-- Rows are added by triggers, so every writer that can give a lane a
-- backlog is covered without knowing about this table:
--   * a partition's next_seq grows (push, message retry): every cursor of it;
--   * a cursor is created (first push of a lane, group registration,
--     group reset): conservatively, drained or not;
--   * a cursor moves backwards (seek).
-- Acks only move cursors forward and never add a row.
--
-- Locks: the triggers only INSERT ... ON CONFLICT DO NOTHING (no row locks
-- on cursors, no foreign key checks), so pushes and bundles keep their lock
-- order: partitions, then cursors, then KV keys. A conflicting insert can
-- wait for a pop that is updating or removing the same row; pops never wait
-- on anything here (SKIP LOCKED), so no cycle can form.
CREATE TABLE queen.ready_lanes (
    partition_id   uuid NOT NULL,
    consumer_group text NOT NULL,
    queue_id       bigint NOT NULL,
    delivered_at   timestamptz,
    PRIMARY KEY (partition_id, consumer_group)
);
CREATE INDEX ready_lanes_order_idx
    ON queen.ready_lanes (queue_id, consumer_group, delivered_at NULLS FIRST, partition_id);

CREATE FUNCTION queen.ready_on_push() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO queen.ready_lanes (partition_id, consumer_group, queue_id, delivered_at)
  SELECT c.partition_id, c.consumer_group, c.queue_id, c.last_delivered_at
    FROM queen.cursors c WHERE c.partition_id = NEW.id
  ON CONFLICT DO NOTHING;
  RETURN NULL;
END $$;
CREATE TRIGGER partitions_ready AFTER UPDATE OF next_seq ON queen.partitions
  FOR EACH ROW WHEN (NEW.next_seq > OLD.next_seq) EXECUTE FUNCTION queen.ready_on_push();

CREATE FUNCTION queen.ready_on_cursor_insert() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO queen.ready_lanes (partition_id, consumer_group, queue_id, delivered_at)
  SELECT n.partition_id, n.consumer_group, n.queue_id, n.last_delivered_at FROM new_rows n
  ON CONFLICT DO NOTHING;
  RETURN NULL;
END $$;
CREATE TRIGGER cursors_ready_insert AFTER INSERT ON queen.cursors
  REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION queen.ready_on_cursor_insert();

CREATE FUNCTION queen.ready_on_rewind() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO queen.ready_lanes (partition_id, consumer_group, queue_id, delivered_at)
  VALUES (NEW.partition_id, NEW.consumer_group, NEW.queue_id, NEW.last_delivered_at)
  ON CONFLICT DO NOTHING;
  RETURN NULL;
END $$;
CREATE TRIGGER cursors_ready_rewind AFTER UPDATE OF next_seq ON queen.cursors
  FOR EACH ROW WHEN (NEW.next_seq < OLD.next_seq) EXECUTE FUNCTION queen.ready_on_rewind();

CREATE FUNCTION queen.ready_on_cursor_delete() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  DELETE FROM queen.ready_lanes r USING old_rows o
   WHERE r.partition_id = o.partition_id AND r.consumer_group = o.consumer_group;
  RETURN NULL;
END $$;
CREATE TRIGGER cursors_ready_delete AFTER DELETE ON queen.cursors
  REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION queen.ready_on_cursor_delete();

-- Backfill exactly, with pushes and seeks held off meanwhile.
LOCK TABLE queen.partitions, queen.cursors IN SHARE MODE;
INSERT INTO queen.ready_lanes (partition_id, consumer_group, queue_id, delivered_at)
SELECT c.partition_id, c.consumer_group, c.queue_id, c.last_delivered_at
  FROM queen.cursors c JOIN queen.partitions p ON p.id = c.partition_id
 WHERE c.next_seq < p.next_seq;
