-- Engine::pop of one queue (a lone request, or a batch member run alone):
-- queue, partition, group, batch, partitions, leaseSeconds, autoAck,
-- subscription mode and start, this broker's encryption key id.
SELECT queen.pop_api($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)::text
