-- Messages, the in-context window, committed steps and compaction plans.
ALTER TABLE agents ADD COLUMN system_message_id TEXT NOT NULL DEFAULT '';
ALTER TABLE agents ADD COLUMN message_count BIGINT NOT NULL DEFAULT 0;
ALTER TABLE agents ADD COLUMN archival_count BIGINT NOT NULL DEFAULT 0;
ALTER TABLE agents ADD COLUMN delivered_revision BIGINT NOT NULL DEFAULT 0;
ALTER TABLE agents ADD COLUMN tools_json TEXT NOT NULL DEFAULT '[]';
CREATE TABLE messages (
    rowkey BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    id TEXT NOT NULL UNIQUE,
    tenant TEXT NOT NULL,
    agent_id TEXT NOT NULL REFERENCES agents (id) ON DELETE CASCADE,
    role TEXT NOT NULL,
    content TEXT NOT NULL,
    tool_calls TEXT NOT NULL,
    tool_call_id TEXT NOT NULL,
    name TEXT NOT NULL,
    step_id TEXT NOT NULL,
    tokens BIGINT NOT NULL,
    counter TEXT NOT NULL,
    created_at DOUBLE PRECISION NOT NULL
);
CREATE INDEX messages_by_agent ON messages (agent_id, rowkey);
CREATE INDEX messages_by_agent_time ON messages (agent_id, created_at, rowkey);
CREATE TABLE context_window (
    agent_id TEXT NOT NULL REFERENCES agents (id) ON DELETE CASCADE,
    position INTEGER NOT NULL,
    message_id TEXT NOT NULL,
    PRIMARY KEY (agent_id, position)
);
CREATE TABLE steps (
    agent_id TEXT NOT NULL REFERENCES agents (id) ON DELETE CASCADE,
    step_id TEXT NOT NULL,
    request_hash TEXT NOT NULL,
    message_ids TEXT NOT NULL,
    context_version BIGINT NOT NULL,
    created_at DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (agent_id, step_id)
);
CREATE TABLE compaction_plans (
    plan_id TEXT PRIMARY KEY,
    tenant TEXT NOT NULL,
    agent_id TEXT NOT NULL REFERENCES agents (id) ON DELETE CASCADE,
    base_context_version BIGINT NOT NULL,
    message_ids TEXT NOT NULL,
    created_at DOUBLE PRECISION NOT NULL,
    applied_at DOUBLE PRECISION
);
