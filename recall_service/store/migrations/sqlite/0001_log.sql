-- The recall log: streams, records, Merkle nodes, signed checkpoints, and the participant
-- projection of ATTACH / DETACH records. Hashes are raw 32-byte BLOBs; times are integer µs.
CREATE TABLE streams (
    rowkey INTEGER PRIMARY KEY AUTOINCREMENT,
    tenant TEXT NOT NULL,
    id TEXT NOT NULL,
    kind INTEGER NOT NULL,
    created_by TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    genesis BLOB NOT NULL,
    size INTEGER NOT NULL,
    head BLOB NOT NULL,
    root BLOB NOT NULL,
    last_time INTEGER NOT NULL,
    -- The Merkle tree's peaks (perfect subtrees, left to right), 32 bytes each.
    frontier BLOB NOT NULL,
    UNIQUE (tenant, id)
);
CREATE TABLE records (
    stream INTEGER NOT NULL REFERENCES streams (rowkey),
    seq INTEGER NOT NULL,
    kind INTEGER NOT NULL,
    source_agent_id TEXT NOT NULL,
    written_by TEXT NOT NULL,
    subject_agent_id TEXT NOT NULL,
    role INTEGER NOT NULL,
    target_seq INTEGER NOT NULL,
    content TEXT,
    salt BLOB,
    content_hash BLOB NOT NULL,
    tags TEXT NOT NULL,
    metadata TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    idempotency_key TEXT NOT NULL,
    leaf_hash BLOB NOT NULL,
    chain_hash BLOB NOT NULL,
    PRIMARY KEY (stream, seq)
) WITHOUT ROWID;
CREATE UNIQUE INDEX records_by_idempotency_key
    ON records (stream, idempotency_key) WHERE idempotency_key != '';
CREATE INDEX records_by_time ON records (stream, created_at);
CREATE INDEX records_by_author ON records (stream, source_agent_id, seq);
CREATE INDEX records_by_target ON records (stream, target_seq) WHERE kind = 4;
CREATE TABLE record_tags (
    stream INTEGER NOT NULL,
    tag TEXT NOT NULL,
    seq INTEGER NOT NULL,
    PRIMARY KEY (stream, tag, seq)
) WITHOUT ROWID;
-- Interior nodes (level >= 1) of each stream's Merkle tree; level 0 is records.leaf_hash.
CREATE TABLE merkle_nodes (
    stream INTEGER NOT NULL,
    level INTEGER NOT NULL,
    idx INTEGER NOT NULL,
    hash BLOB NOT NULL,
    PRIMARY KEY (stream, level, idx)
) WITHOUT ROWID;
CREATE TABLE checkpoints (
    stream INTEGER NOT NULL,
    size INTEGER NOT NULL,
    root BLOB NOT NULL,
    head BLOB NOT NULL,
    time INTEGER NOT NULL,
    key_id TEXT NOT NULL,
    signature BLOB NOT NULL,
    PRIMARY KEY (stream, size)
) WITHOUT ROWID;
CREATE TABLE participants (
    stream INTEGER NOT NULL,
    agent_id TEXT NOT NULL,
    role INTEGER NOT NULL,
    attached_seq INTEGER NOT NULL,
    attached_at INTEGER NOT NULL,
    detached_seq INTEGER NOT NULL,
    PRIMARY KEY (stream, agent_id)
) WITHOUT ROWID;
CREATE INDEX participants_by_agent ON participants (agent_id, detached_seq, stream);
