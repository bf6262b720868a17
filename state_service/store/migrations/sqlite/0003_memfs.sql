-- MemFS: the agent's memory revision is a commit id; earlier revisions map to counters so a
-- step can acknowledge a memory update by its commit id.
ALTER TABLE agents ADD COLUMN memory_head TEXT NOT NULL DEFAULT '';
CREATE TABLE memory_revisions (
    agent_id TEXT NOT NULL REFERENCES agents (id) ON DELETE CASCADE,
    revision TEXT NOT NULL,
    counter INTEGER NOT NULL,
    PRIMARY KEY (agent_id, revision)
);
-- The window's length, kept with the agent so a prompt's recall count needs no window read.
ALTER TABLE agents ADD COLUMN window_size INTEGER NOT NULL DEFAULT 0;
UPDATE agents SET window_size = (SELECT COUNT(*) FROM context_window w WHERE w.agent_id = agents.id);
