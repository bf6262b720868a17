-- When a message was said, as its writer gave it (WriteEntry.occurred_at): microseconds
-- since the epoch, NULL when not given. Part of the record's canonical bytes (domain v2).
ALTER TABLE records ADD COLUMN occurred_at BIGINT;
