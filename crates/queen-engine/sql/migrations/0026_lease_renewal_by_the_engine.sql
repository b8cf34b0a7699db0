-- A lease extension answers how many lanes it renewed and until when; the
-- engine writes the answer (queen_wire::LeaseRenewal).
DROP FUNCTION IF EXISTS queen.extend_lease(text, integer);
