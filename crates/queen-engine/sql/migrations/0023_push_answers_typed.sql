-- queen.push_rows answers typed columns only (ids, verdicts, queued): its
-- JSON `result` and the `p_lean` switch are gone, and each caller writes
-- its own answer. A stream cycle answers its pushed ids (`push_ids`) and
-- the engine writes its push_results. Changed result types cannot be
-- replaced in place, so the old signatures go before the function files
-- re-create them (migrations run first, in the same transaction).
DROP FUNCTION IF EXISTS queen.push_rows(text[], text[], text[], text[], text[], integer[], uuid[], boolean,
                                        text[], text[], bigint[], boolean);
DROP FUNCTION IF EXISTS queen.push_lane(text, text, text[], text[], text[], uuid[], boolean, text[], text[],
                                        bigint[], boolean);
DROP FUNCTION IF EXISTS queen.push_lanes(text[], text[], text[], text[], text[], integer[], uuid[], boolean,
                                         text[], text[], bigint[], boolean);
DROP FUNCTION IF EXISTS queen.stream_cycle(uuid, uuid, text, text[], text[], text[], text[], text[], text[],
                                           text[], text[], text[], boolean, text, text, text, integer, boolean,
                                           text[]);
