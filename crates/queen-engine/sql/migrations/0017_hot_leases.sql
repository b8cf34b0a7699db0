-- Taking and releasing a lease are HOT updates of the cursor row: no index
-- covers lease_id any more (an index on it made every pop and ack write a
-- new index entry in each of the table's indexes). A lease id names its
-- queue instead (queen.lease_id_for), and queen.extend_lease finds the
-- lease's cursors through cursors_queue_group_idx. Leases taken before
-- this migration cannot be extended; they expire and redeliver.
DROP INDEX IF EXISTS queen.cursors_lease_idx;

-- Room on each page keeps the lease, ack and delivery-time updates HOT.
-- Pages written from now on keep half their room.
ALTER TABLE queen.cursors SET (fillfactor = 50);
