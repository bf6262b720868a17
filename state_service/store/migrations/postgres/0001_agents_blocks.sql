-- Agents, blocks, attachments and the compiled-prompt cache (PostgreSQL twin of SQLite 0001).
CREATE TABLE blocks (
    rowkey BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    id TEXT NOT NULL UNIQUE,
    tenant TEXT NOT NULL,
    label TEXT NOT NULL,
    value TEXT NOT NULL,
    char_limit BIGINT NOT NULL,
    description TEXT NOT NULL,
    read_only INTEGER NOT NULL,
    hidden INTEGER NOT NULL,
    tags TEXT NOT NULL,
    metadata TEXT NOT NULL,
    version BIGINT NOT NULL,
    created_at DOUBLE PRECISION NOT NULL,
    updated_at DOUBLE PRECISION NOT NULL
);
CREATE INDEX blocks_by_tenant ON blocks (tenant, rowkey);
CREATE INDEX blocks_by_label ON blocks (tenant, label, rowkey);
CREATE TABLE block_tags (
    block_id TEXT NOT NULL REFERENCES blocks (id) ON DELETE CASCADE,
    tag TEXT NOT NULL,
    PRIMARY KEY (block_id, tag)
);
CREATE INDEX block_tags_by_tag ON block_tags (tag, block_id);
CREATE TABLE agents (
    rowkey BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    id TEXT NOT NULL UNIQUE,
    tenant TEXT NOT NULL,
    name TEXT NOT NULL,
    system TEXT NOT NULL,
    system_hash TEXT NOT NULL,
    model TEXT NOT NULL,
    context_window BIGINT NOT NULL,
    tools TEXT NOT NULL,
    tools_tokens BIGINT NOT NULL,
    tools_counter TEXT NOT NULL,
    tool_rules TEXT NOT NULL,
    tags TEXT NOT NULL,
    metadata TEXT NOT NULL,
    memory_mode TEXT NOT NULL,
    memory_update_mode TEXT NOT NULL,
    context_version BIGINT NOT NULL,
    memory_revision BIGINT NOT NULL,
    memory_updated_at DOUBLE PRECISION NOT NULL,
    version BIGINT NOT NULL,
    created_at DOUBLE PRECISION NOT NULL,
    updated_at DOUBLE PRECISION NOT NULL
);
CREATE INDEX agents_by_tenant ON agents (tenant, rowkey);
CREATE INDEX agents_by_name ON agents (tenant, name, rowkey);
CREATE TABLE agent_tags (
    agent_id TEXT NOT NULL REFERENCES agents (id) ON DELETE CASCADE,
    tag TEXT NOT NULL,
    PRIMARY KEY (agent_id, tag)
);
CREATE INDEX agent_tags_by_tag ON agent_tags (tag, agent_id);
CREATE TABLE agent_blocks (
    agent_id TEXT NOT NULL REFERENCES agents (id) ON DELETE CASCADE,
    block_id TEXT NOT NULL REFERENCES blocks (id),
    position INTEGER NOT NULL,
    PRIMARY KEY (agent_id, block_id)
);
CREATE INDEX agent_blocks_by_block ON agent_blocks (block_id, agent_id);
CREATE TABLE agent_prompts (
    agent_id TEXT PRIMARY KEY REFERENCES agents (id) ON DELETE CASCADE,
    system_prompt TEXT NOT NULL,
    compiled_memory TEXT NOT NULL,
    raw_hash TEXT NOT NULL,
    memory_revision BIGINT NOT NULL,
    prompt_hash TEXT NOT NULL,
    system_tokens BIGINT NOT NULL,
    memory_tokens BIGINT NOT NULL,
    counter TEXT NOT NULL,
    built_at DOUBLE PRECISION NOT NULL
);
