-- MemFS revisions, and the window's length kept with the agent.
ALTER TABLE agents ADD COLUMN memory_head TEXT NOT NULL DEFAULT '';
CREATE TABLE memory_revisions (
    agent_id TEXT NOT NULL REFERENCES agents (id) ON DELETE CASCADE,
    revision TEXT NOT NULL,
    counter BIGINT NOT NULL,
    PRIMARY KEY (agent_id, revision)
);
ALTER TABLE agents ADD COLUMN window_size BIGINT NOT NULL DEFAULT 0;
UPDATE agents SET window_size = (SELECT COUNT(*) FROM context_window w WHERE w.agent_id = agents.id);
