-- Message ids sort in partition order. A partition keeps the last id clock
-- it handed out (milliseconds << 12 | a 12-bit counter, the first 60 bits
-- of a UUIDv7 without its version nibble); a push takes the next values
-- under the partition lock, so ids rise with offsets even within one
-- millisecond and across concurrent pushes.
ALTER TABLE queen.partitions ADD COLUMN id_clock bigint NOT NULL DEFAULT 0;
