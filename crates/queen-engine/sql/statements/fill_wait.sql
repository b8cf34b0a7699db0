-- A queue's minPopWaitTime (engine/fill_wait.rs; no row: the queue does not exist yet).
SELECT min_pop_wait_time FROM queen.queues WHERE name = $1
