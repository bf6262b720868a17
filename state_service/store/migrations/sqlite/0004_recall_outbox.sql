-- Messages waiting to be forwarded to the agent's MESSAGES stream in the recall service.
CREATE TABLE recall_outbox (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    tenant TEXT NOT NULL,
    agent_id TEXT NOT NULL,
    message_id TEXT NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    last_error TEXT NOT NULL DEFAULT '',
    failed_at REAL
);
CREATE INDEX recall_outbox_pending ON recall_outbox (failed_at, id);
