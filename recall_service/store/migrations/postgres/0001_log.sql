-- The recall log on PostgreSQL: the tables of migrations/sqlite/0001_log.sql with PostgreSQL
-- types (BYTEA for hashes, BIGINT for seqs, sizes and µs times), so that one set of queries
-- (store/sql_reader.py, store/sql_writer.py) serves both.
CREATE TABLE streams (
    rowkey BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant TEXT NOT NULL,
    id TEXT NOT NULL,
    kind INTEGER NOT NULL,
    created_by TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    genesis BYTEA NOT NULL,
    size BIGINT NOT NULL,
    head BYTEA NOT NULL,
    root BYTEA NOT NULL,
    last_time BIGINT NOT NULL,
    -- The Merkle tree's peaks (perfect subtrees, left to right), 32 bytes each.
    frontier BYTEA NOT NULL,
    UNIQUE (tenant, id)
);
CREATE TABLE records (
    stream BIGINT NOT NULL REFERENCES streams (rowkey),
    seq BIGINT NOT NULL,
    kind INTEGER NOT NULL,
    source_agent_id TEXT NOT NULL,
    written_by TEXT NOT NULL,
    subject_agent_id TEXT NOT NULL,
    role INTEGER NOT NULL,
    target_seq BIGINT NOT NULL,
    content TEXT,
    salt BYTEA,
    content_hash BYTEA NOT NULL,
    tags TEXT NOT NULL,
    metadata TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    idempotency_key TEXT NOT NULL,
    leaf_hash BYTEA NOT NULL,
    chain_hash BYTEA NOT NULL,
    PRIMARY KEY (stream, seq)
);
CREATE UNIQUE INDEX records_by_idempotency_key
    ON records (stream, idempotency_key) WHERE idempotency_key != '';
CREATE INDEX records_by_time ON records (stream, created_at);
CREATE INDEX records_by_author ON records (stream, source_agent_id, seq);
CREATE INDEX records_by_target ON records (stream, target_seq) WHERE kind = 4;
CREATE TABLE record_tags (
    stream BIGINT NOT NULL,
    tag TEXT NOT NULL,
    seq BIGINT NOT NULL,
    PRIMARY KEY (stream, tag, seq)
);
-- Interior nodes (level >= 1) of each stream's Merkle tree; level 0 is records.leaf_hash.
CREATE TABLE merkle_nodes (
    stream BIGINT NOT NULL,
    level INTEGER NOT NULL,
    idx BIGINT NOT NULL,
    hash BYTEA NOT NULL,
    PRIMARY KEY (stream, level, idx)
);
CREATE TABLE checkpoints (
    stream BIGINT NOT NULL,
    size BIGINT NOT NULL,
    root BYTEA NOT NULL,
    head BYTEA NOT NULL,
    time BIGINT NOT NULL,
    key_id TEXT NOT NULL,
    signature BYTEA NOT NULL,
    PRIMARY KEY (stream, size)
);
CREATE TABLE participants (
    stream BIGINT NOT NULL,
    agent_id TEXT NOT NULL,
    role INTEGER NOT NULL,
    attached_seq BIGINT NOT NULL,
    attached_at BIGINT NOT NULL,
    detached_seq BIGINT NOT NULL,
    PRIMARY KEY (stream, agent_id)
);
CREATE INDEX participants_by_agent ON participants (agent_id, detached_seq, stream);
