-- What the search indexer needs from the log: streams found by the time of their last
-- record (the indexer's tail query), and the vectors clients supply with their writes
-- (`--embedder client`). A vector is index input, not part of the hashed record; a
-- redaction deletes it with the content.
CREATE INDEX streams_by_last_time ON streams (last_time);
CREATE TABLE record_vectors (
    stream INTEGER NOT NULL,
    seq INTEGER NOT NULL,
    -- float32, little-endian, unit length.
    vector BLOB NOT NULL,
    PRIMARY KEY (stream, seq)
) WITHOUT ROWID;
