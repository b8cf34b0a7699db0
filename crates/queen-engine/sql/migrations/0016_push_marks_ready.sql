-- Pushes mark ready lanes themselves (queen.push_rows, queen.mark_ready):
-- one set-based insert per push statement instead of a PL/pgSQL trigger
-- call per partition row, and only for the cursors that had drained the
-- lane (a lane with a backlog already has its row). Cursor triggers stay.
DROP TRIGGER IF EXISTS partitions_ready ON queen.partitions;
DROP FUNCTION IF EXISTS queen.ready_on_push();

-- A push rewrites its partition rows (offset, push time, id clock; none
-- indexed): room on each page keeps those updates HOT, so they write no
-- index entries. Pages written from now on keep half their room.
ALTER TABLE queen.partitions SET (fillfactor = 50);
