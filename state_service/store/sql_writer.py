"""Writes of the SQL state stores, inside one transaction (or savepoint)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from cairn_server.sqldb import Db
from state_service.compile import sha256_hex
from state_service.models import (
    Agent,
    AgentEvent,
    Block,
    CompactionPlan,
    Message,
    StepRecord,
    StoredPrompt,
    ToolsPayload,
)
from state_service.store.codec import calls_to_json, rules_to_json, tools_to_json
from state_service.store.sql_reader import SqlReader
from state_service.store.sql_rows import chunks


class SqlTx(SqlReader):
    """Writes inside one transaction; its reads lock the rows they return."""

    def __init__(self, db: Db) -> None:
        super().__init__(db)
        self._lock = db.for_update
        self.events: list[AgentEvent] = []

    # --- blocks --------------------------------------------------------------------------

    def _set_block_tags(self, block: Block) -> None:
        self._c.execute("DELETE FROM block_tags WHERE block_id = ?", (block.id,))
        self._c.executemany(
            "INSERT INTO block_tags (block_id, tag) VALUES (?, ?)",
            [(block.id, tag) for tag in set(block.tags)],
        )

    def insert_block(self, block: Block) -> None:
        """Stores a new block."""
        self._c.execute(
            "INSERT INTO blocks (id, tenant, label, value, char_limit, description, read_only,"
            " hidden, tags, metadata, version, created_at, updated_at)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                block.id,
                block.tenant,
                block.label,
                block.value,
                block.limit,
                block.description,
                int(block.read_only),
                int(block.hidden),
                json.dumps(block.tags),
                json.dumps(block.metadata),
                block.version,
                block.created_at,
                block.updated_at,
            ),
        )
        self._set_block_tags(block)

    def update_block(self, block: Block) -> None:
        """Overwrites a block's fields."""
        self._c.execute(
            "UPDATE blocks SET label = ?, value = ?, char_limit = ?, description = ?,"
            " read_only = ?, hidden = ?, tags = ?, metadata = ?, version = ?, updated_at = ?"
            " WHERE id = ? AND tenant = ?",
            (
                block.label,
                block.value,
                block.limit,
                block.description,
                int(block.read_only),
                int(block.hidden),
                json.dumps(block.tags),
                json.dumps(block.metadata),
                block.version,
                block.updated_at,
                block.id,
                block.tenant,
            ),
        )
        self._set_block_tags(block)

    def delete_block(self, tenant: str, block_id: str) -> None:
        """Deletes a block and its attachments."""
        self._c.execute("DELETE FROM agent_blocks WHERE block_id = ?", (block_id,))
        self._c.execute("DELETE FROM blocks WHERE id = ? AND tenant = ?", (block_id, tenant))

    # --- agents --------------------------------------------------------------------------

    @staticmethod
    def _agent_values(agent: Agent, tools: ToolsPayload) -> dict[str, Any]:
        return {
            "id": agent.id,
            "tenant": agent.tenant,
            "name": agent.name,
            "system": agent.system,
            "system_hash": sha256_hex(agent.system),
            "model": agent.model,
            "context_window": agent.context_window,
            "tools": tools_to_json(agent.tools),
            "tools_json": tools.json,
            "tools_tokens": tools.tokens,
            "tools_counter": tools.counter,
            "tool_rules": rules_to_json(agent.tool_rules),
            "tags": json.dumps(agent.tags),
            "metadata": json.dumps(agent.metadata),
            "memory_mode": agent.memory_mode.value,
            "memory_update_mode": agent.memory_update_mode.value,
            "context_version": agent.context_version,
            "memory_revision": agent.memory_revision,
            "memory_updated_at": agent.memory_updated_at,
            "version": agent.version,
            "created_at": agent.created_at,
            "updated_at": agent.updated_at,
            "system_message_id": agent.system_message_id,
            "message_count": agent.message_count,
            "archival_count": agent.archival_count,
            "delivered_revision": agent.delivered_revision,
            "memory_head": agent.memory_head,
            "window_size": agent.window_size,
        }

    def _set_agent_tags(self, agent: Agent) -> None:
        self._c.execute("DELETE FROM agent_tags WHERE agent_id = ?", (agent.id,))
        self._c.executemany(
            "INSERT INTO agent_tags (agent_id, tag) VALUES (?, ?)",
            [(agent.id, tag) for tag in set(agent.tags)],
        )

    def insert_agent(self, agent: Agent, tools: ToolsPayload) -> None:
        """Stores a new agent (not its block attachments or window)."""
        values = self._agent_values(agent, tools)
        columns = ", ".join(values)
        marks = ", ".join(f":{name}" for name in values)
        self._c.execute(f"INSERT INTO agents ({columns}) VALUES ({marks})", values)
        self._set_agent_tags(agent)

    def update_agent(self, agent: Agent, tools: ToolsPayload) -> None:
        """Overwrites an agent's own fields."""
        values = self._agent_values(agent, tools)
        assignments = ", ".join(
            f"{name} = :{name}" for name in values if name not in ("id", "tenant", "created_at")
        )
        self._c.execute(
            f"UPDATE agents SET {assignments} WHERE id = :id AND tenant = :tenant", values
        )
        self._set_agent_tags(agent)

    def delete_agent(self, tenant: str, agent_id: str) -> None:
        """Deletes an agent with its attachments, prompt, window and history."""
        self._c.execute("DELETE FROM agents WHERE id = ? AND tenant = ?", (agent_id, tenant))

    def set_agent_blocks(self, agent_id: str, block_ids: Sequence[str]) -> None:
        """Replaces the agent's attachments with `block_ids`, in render order."""
        self._c.execute("DELETE FROM agent_blocks WHERE agent_id = ?", (agent_id,))
        self._c.executemany(
            "INSERT INTO agent_blocks (agent_id, block_id, position) VALUES (?, ?, ?)",
            [(agent_id, block_id, i) for i, block_id in enumerate(block_ids)],
        )

    def bump_memory(
        self, tenant: str, agent_ids: Sequence[str], now: float, bump_version: bool
    ) -> None:
        """Increments memory_revision (and optionally version) of many agents at once."""
        version = ", version = version + 1, updated_at = ?" if bump_version else ""
        for chunk in chunks(agent_ids):
            marks = ",".join("?" * len(chunk))
            params: list[Any] = [now] + ([now] if bump_version else []) + [tenant, *chunk]
            self._c.execute(
                "UPDATE agents SET memory_revision = memory_revision + 1,"
                f" memory_updated_at = ?{version} WHERE tenant = ? AND id IN ({marks})",
                params,
            )

    def set_context(
        self,
        tenant: str,
        agent_id: str,
        *,
        context_version: int,
        message_count: int,
        delivered_revision: int,
    ) -> None:
        """Records a new window version and history size."""
        self._c.execute(
            "UPDATE agents SET context_version = ?, message_count = ?, delivered_revision = ?"
            " WHERE id = ? AND tenant = ?",
            (context_version, message_count, delivered_revision, agent_id, tenant),
        )

    def set_memory_head(
        self, tenant: str, agent_id: str, head: str, counter: int, now: float
    ) -> None:
        """Moves a MEMFS agent to a new commit and records its counter."""
        self._c.execute(
            "UPDATE agents SET memory_head = ?, memory_revision = ?, memory_updated_at = ?"
            " WHERE id = ? AND tenant = ?",
            (head, counter, now, agent_id, tenant),
        )
        self._c.execute(
            "INSERT INTO memory_revisions (agent_id, revision, counter) VALUES (?, ?, ?)"
            " ON CONFLICT (agent_id, revision) DO UPDATE SET counter = excluded.counter",
            (agent_id, head, counter),
        )

    def add_archival(self, tenant: str, agent_id: str, count: int) -> None:
        """Counts archival records written for the agent."""
        self._c.execute(
            "UPDATE agents SET archival_count = archival_count + ? WHERE id = ? AND tenant = ?",
            (count, agent_id, tenant),
        )

    def save_prompts(self, prompts: Sequence[StoredPrompt]) -> None:
        """Stores compiled prompts, replacing earlier ones."""
        self._c.executemany(
            "INSERT INTO agent_prompts (agent_id, system_prompt, compiled_memory,"
            " raw_hash, memory_revision, prompt_hash, system_tokens, memory_tokens, counter,"
            " built_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
            " ON CONFLICT (agent_id) DO UPDATE SET system_prompt = excluded.system_prompt,"
            " compiled_memory = excluded.compiled_memory, raw_hash = excluded.raw_hash,"
            " memory_revision = excluded.memory_revision, prompt_hash = excluded.prompt_hash,"
            " system_tokens = excluded.system_tokens, memory_tokens = excluded.memory_tokens,"
            " counter = excluded.counter, built_at = excluded.built_at",
            [
                (
                    p.agent_id,
                    p.system_prompt,
                    p.compiled_memory,
                    p.raw_hash,
                    p.memory_revision,
                    p.prompt_hash,
                    p.system_tokens,
                    p.memory_tokens,
                    p.counter,
                    p.built_at,
                )
                for p in prompts
            ],
        )

    # --- messages ------------------------------------------------------------------------

    def insert_messages(self, tenant: str, messages: Sequence[Message], counter: str) -> None:
        """Appends messages to history."""
        self._c.executemany(
            "INSERT INTO messages (id, tenant, agent_id, role, content, tool_calls,"
            " tool_call_id, name, step_id, tokens, counter, created_at)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [
                (
                    m.id,
                    tenant,
                    m.agent_id,
                    m.role.value,
                    m.content,
                    calls_to_json(m.tool_calls),
                    m.tool_call_id,
                    m.name,
                    m.step_id,
                    m.tokens,
                    counter,
                    m.created_at,
                )
                for m in messages
            ],
        )

    def append_window(self, agent_id: str, start: int, message_ids: Sequence[str]) -> None:
        """Adds messages at positions start, start+1, ... of the window."""
        self._c.executemany(
            "INSERT INTO context_window (agent_id, position, message_id) VALUES (?, ?, ?)",
            [(agent_id, start + i, m) for i, m in enumerate(message_ids)],
        )
        self._c.execute(
            "UPDATE agents SET window_size = ? WHERE id = ?", (start + len(message_ids), agent_id)
        )

    def set_window(self, agent_id: str, message_ids: Sequence[str]) -> None:
        """Replaces the whole window."""
        self._c.execute("DELETE FROM context_window WHERE agent_id = ?", (agent_id,))
        self.append_window(agent_id, 0, message_ids)

    def enqueue_forwards(self, tenant: str, agent_id: str, message_ids: Sequence[str]) -> None:
        """Queues messages for the recall service, in the step's transaction."""
        self._c.executemany(
            "INSERT INTO recall_outbox (tenant, agent_id, message_id) VALUES (?, ?, ?)",
            [(tenant, agent_id, m) for m in message_ids],
        )

    def drop_forwards(self, ids: Sequence[int]) -> None:
        """Removes forwarded messages from the queue."""
        self._c.executemany("DELETE FROM recall_outbox WHERE id = ?", [(i,) for i in ids])

    def note_forward_failure(
        self, ids: Sequence[int], error: str, give_up: bool, now: float
    ) -> None:
        """Records a failed attempt; a permanent failure stops further attempts."""
        self._c.executemany(
            "UPDATE recall_outbox SET attempts = attempts + 1, last_error = ?,"
            " failed_at = ? WHERE id = ?",
            [(error[:500], now if give_up else None, i) for i in ids],
        )

    def insert_step(self, step: StepRecord) -> None:
        """Records a committed step."""
        self._c.execute(
            "INSERT INTO steps (agent_id, step_id, request_hash, message_ids, context_version,"
            " created_at) VALUES (?, ?, ?, ?, ?, ?)",
            (
                step.agent_id,
                step.step_id,
                step.request_hash,
                json.dumps(list(step.message_ids)),
                step.context_version,
                step.created_at,
            ),
        )

    def insert_plan(self, plan: CompactionPlan) -> None:
        """Stores a compaction plan."""
        self._c.execute(
            "INSERT INTO compaction_plans (plan_id, tenant, agent_id, base_context_version,"
            " message_ids, created_at) VALUES (?, ?, ?, ?, ?, ?)",
            (
                plan.plan_id,
                plan.tenant,
                plan.agent_id,
                plan.base_context_version,
                json.dumps(list(plan.message_ids)),
                plan.created_at,
            ),
        )

    def mark_plan_applied(self, plan_id: str, now: float) -> None:
        """Marks a plan applied."""
        self._c.execute(
            "UPDATE compaction_plans SET applied_at = ? WHERE plan_id = ?", (now, plan_id)
        )

    def emit(self, events: Sequence[AgentEvent]) -> None:
        """Queues events to publish once the transaction commits."""
        self.events.extend(events)
