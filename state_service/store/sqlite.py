"""The embedded state store: SQLite in WAL mode, one writer, readers on their own connections."""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from cairn_server import sqlite as sqlite_util
from state_service.compile import sha256_hex
from state_service.models import (
    Agent,
    AgentEvent,
    Block,
    CompactionPlan,
    MemoryMode,
    MemoryUpdateMode,
    Message,
    PromptState,
    Role,
    StepRecord,
    StoredPrompt,
    ToolsPayload,
)
from state_service.store.codec import (
    calls_from_json,
    calls_to_json,
    rules_from_json,
    rules_to_json,
    tools_from_json,
    tools_to_json,
)

STATE_FILE = "state.sqlite3"
_CHUNK = 500

_AGENT_COLUMNS = (
    "id, tenant, name, system, model, context_window, tools, tool_rules, tags, metadata,"
    " memory_mode, memory_update_mode, context_version, memory_revision, memory_updated_at,"
    " version, created_at, updated_at, system_message_id, message_count, archival_count,"
    " delivered_revision, rowkey"
)
_AGENT_ROWKEY = 22
_BLOCK_COLUMNS = (
    "b.id, b.tenant, b.label, b.value, b.char_limit, b.description, b.read_only, b.hidden,"
    " b.tags, b.metadata, b.version, b.created_at, b.updated_at, b.rowkey"
)
# The system message's content is the agent's stored prompt, read at query time.
_MESSAGE_COLUMNS = (
    "m.id, m.agent_id, m.role,"
    " CASE WHEN m.role = 'system' THEN COALESCE(p.system_prompt, m.content) ELSE m.content END,"
    " m.tool_calls, m.tool_call_id, m.name, m.step_id, m.created_at, m.tokens, m.rowkey,"
    " m.counter"
)
_MESSAGE_FROM = "messages m LEFT JOIN agent_prompts p ON p.agent_id = m.agent_id"


def _block(row: Sequence[Any]) -> Block:
    return Block(
        id=row[0],
        tenant=row[1],
        label=row[2],
        value=row[3],
        limit=row[4],
        description=row[5],
        read_only=bool(row[6]),
        hidden=bool(row[7]),
        tags=json.loads(row[8]),
        metadata=json.loads(row[9]),
        version=row[10],
        created_at=row[11],
        updated_at=row[12],
    )


def _agent(row: Sequence[Any], blocks: list[Block], window: list[str]) -> Agent:
    return Agent(
        id=row[0],
        tenant=row[1],
        name=row[2],
        system=row[3],
        model=row[4],
        context_window=row[5],
        tools=tools_from_json(row[6]),
        tool_rules=rules_from_json(row[7]),
        tags=json.loads(row[8]),
        metadata=json.loads(row[9]),
        memory_mode=MemoryMode(row[10]),
        memory_update_mode=MemoryUpdateMode(row[11]),
        context_version=row[12],
        memory_revision=row[13],
        memory_updated_at=row[14],
        version=row[15],
        created_at=row[16],
        updated_at=row[17],
        system_message_id=row[18],
        message_count=row[19],
        archival_count=row[20],
        delivered_revision=row[21],
        blocks=blocks,
        message_ids=window,
    )


def _message(row: Sequence[Any], counter: str | None = None) -> Message:
    return Message(
        id=row[0],
        agent_id=row[1],
        role=Role(row[2]),
        content=row[3],
        tool_calls=calls_from_json(row[4]),
        tool_call_id=row[5],
        name=row[6],
        step_id=row[7],
        created_at=row[8],
        tokens=row[9] if counter is None or row[11] == counter else -1,
    )


def _tag_filter(
    table: str, key: str, tags: Sequence[str], match_all: bool
) -> tuple[str, list[Any]]:
    if not tags:
        return "", []
    marks = ",".join("?" * len(tags))
    if match_all:
        clause = (
            f" AND id IN (SELECT {key} FROM {table} WHERE tag IN ({marks})"
            f" GROUP BY {key} HAVING COUNT(*) = ?)"
        )
        return clause, [*tags, len(set(tags))]
    return f" AND id IN (SELECT {key} FROM {table} WHERE tag IN ({marks}))", list(tags)


def _chunks(items: Sequence[str]) -> Iterator[Sequence[str]]:
    for start in range(0, len(items), _CHUNK):
        yield items[start : start + _CHUNK]


class _Reader:
    """Queries over one connection."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._c = conn

    # --- agents and blocks ---------------------------------------------------------------

    def _blocks_of(self, agent_ids: Sequence[str]) -> dict[str, list[Block]]:
        result: dict[str, list[Block]] = {agent_id: [] for agent_id in agent_ids}
        for chunk in _chunks(agent_ids):
            marks = ",".join("?" * len(chunk))
            rows = self._c.execute(
                f"SELECT ab.agent_id, {_BLOCK_COLUMNS} FROM agent_blocks ab"
                f" JOIN blocks b ON b.id = ab.block_id WHERE ab.agent_id IN ({marks})"
                " ORDER BY ab.agent_id, ab.position",
                chunk,
            ).fetchall()
            for row in rows:
                result[row[0]].append(_block(row[1:]))
        return result

    def _windows_of(self, agent_ids: Sequence[str]) -> dict[str, list[str]]:
        result: dict[str, list[str]] = {agent_id: [] for agent_id in agent_ids}
        for chunk in _chunks(agent_ids):
            marks = ",".join("?" * len(chunk))
            for agent_id, message_id in self._c.execute(
                f"SELECT agent_id, message_id FROM context_window WHERE agent_id IN ({marks})"
                " ORDER BY agent_id, position",
                chunk,
            ):
                result[agent_id].append(message_id)
        return result

    def get_agent(self, tenant: str, agent_id: str) -> Agent | None:
        """The agent with its blocks in render order, or None."""
        agents = self.load_agents(tenant, [agent_id])
        return agents[0] if agents else None

    def get_agent_row(self, tenant: str, agent_id: str) -> Agent | None:
        """The agent's own fields only: no blocks, an empty `message_ids` (see window_size)."""
        row = self._c.execute(
            f"SELECT {_AGENT_COLUMNS} FROM agents WHERE tenant = ? AND id = ?", (tenant, agent_id)
        ).fetchone()
        return None if row is None else _agent(row, [], [])

    def window_size(self, agent_id: str) -> int:
        """How many messages the window holds, the system message included."""
        row = self._c.execute(
            "SELECT COALESCE(MAX(position) + 1, 0) FROM context_window WHERE agent_id = ?",
            (agent_id,),
        ).fetchone()
        return int(row[0])

    def load_agents(self, tenant: str, agent_ids: Sequence[str]) -> list[Agent]:
        """Agents with their blocks, in the order of `agent_ids`."""
        rows: dict[str, Sequence[Any]] = {}
        for chunk in _chunks(agent_ids):
            marks = ",".join("?" * len(chunk))
            for row in self._c.execute(
                f"SELECT {_AGENT_COLUMNS} FROM agents WHERE tenant = ? AND id IN ({marks})",
                [tenant, *chunk],
            ):
                rows[row[0]] = row
        found = [agent_id for agent_id in agent_ids if agent_id in rows]
        blocks = self._blocks_of(found)
        windows = self._windows_of(found)
        return [_agent(rows[a], blocks[a], windows[a]) for a in found]

    def list_agents(
        self,
        tenant: str,
        *,
        after: int,
        limit: int,
        tags: Sequence[str],
        match_all_tags: bool,
        name: str,
    ) -> list[tuple[int, Agent]]:
        """Up to `limit` agents with row keys above `after`, in creation order."""
        where, params = _tag_filter("agent_tags", "agent_id", tags, match_all_tags)
        if name:
            where += " AND name = ?"
            params.append(name)
        rows = self._c.execute(
            f"SELECT {_AGENT_COLUMNS} FROM agents WHERE tenant = ? AND rowkey > ?{where}"
            " ORDER BY rowkey LIMIT ?",
            [tenant, after, *params, limit],
        ).fetchall()
        ids = [row[0] for row in rows]
        blocks = self._blocks_of(ids)
        windows = self._windows_of(ids)
        return [(row[_AGENT_ROWKEY], _agent(row, blocks[row[0]], windows[row[0]])) for row in rows]

    def get_block(self, tenant: str, block_id: str) -> Block | None:
        """The block, or None."""
        row = self._c.execute(
            f"SELECT {_BLOCK_COLUMNS} FROM blocks b WHERE b.tenant = ? AND b.id = ?",
            (tenant, block_id),
        ).fetchone()
        return None if row is None else _block(row)

    def list_blocks(
        self,
        tenant: str,
        *,
        after: int,
        limit: int,
        label: str,
        tags: Sequence[str],
        match_all_tags: bool,
    ) -> list[tuple[int, Block]]:
        """Up to `limit` blocks with row keys above `after`, in creation order."""
        where, params = _tag_filter("block_tags", "block_id", tags, match_all_tags)
        if label:
            where += " AND label = ?"
            params.append(label)
        rows = self._c.execute(
            f"SELECT {_BLOCK_COLUMNS} FROM blocks b WHERE tenant = ? AND rowkey > ?{where}"
            " ORDER BY rowkey LIMIT ?",
            [tenant, after, *params, limit],
        ).fetchall()
        return [(row[13], _block(row)) for row in rows]

    def get_prompt_state(self, tenant: str, agent_id: str) -> PromptState | None:
        """The compile cache's keys and entry for one agent, in one read."""
        row = self._c.execute(
            "SELECT a.system_hash, a.memory_revision, a.memory_update_mode, a.context_window,"
            " a.tools_tokens, a.tools_counter, a.context_version, a.delivered_revision,"
            " a.tools_json, p.system_prompt, p.compiled_memory, p.raw_hash, p.memory_revision,"
            " p.prompt_hash, p.system_tokens, p.memory_tokens, p.counter, p.built_at"
            " FROM agents a LEFT JOIN agent_prompts p ON p.agent_id = a.id"
            " WHERE a.tenant = ? AND a.id = ?",
            (tenant, agent_id),
        ).fetchone()
        if row is None:
            return None
        prompt = None
        if row[9] is not None:
            prompt = StoredPrompt(agent_id, *row[9:18])
        return PromptState(
            agent_id=agent_id,
            system_hash=row[0],
            memory_revision=row[1],
            memory_update_mode=MemoryUpdateMode(row[2]),
            context_window=row[3],
            tools_tokens=row[4],
            tools_counter=row[5],
            prompt=prompt,
            context_version=row[6],
            delivered_revision=row[7],
            tools_json=row[8],
        )

    def agent_ids_with_block(self, tenant: str, block_id: str) -> list[str]:
        """Ids of the agents the block is attached to, oldest agent first."""
        rows = self._c.execute(
            "SELECT a.id FROM agent_blocks ab JOIN agents a ON a.id = ab.agent_id"
            " WHERE ab.block_id = ? AND a.tenant = ? ORDER BY a.rowkey",
            (block_id, tenant),
        ).fetchall()
        return [row[0] for row in rows]

    # --- messages ------------------------------------------------------------------------

    def window(self, tenant: str, agent_id: str, counter: str) -> list[Message]:
        """The in-context messages in order; the system message carries the stored prompt.

        A message counted by another tokenizer than `counter` comes back with tokens = -1.
        """
        rows = self._c.execute(
            f"SELECT {_MESSAGE_COLUMNS} FROM context_window w"
            " JOIN messages m ON m.id = w.message_id"
            " LEFT JOIN agent_prompts p ON p.agent_id = m.agent_id"
            " WHERE w.agent_id = ? AND m.tenant = ? ORDER BY w.position",
            (agent_id, tenant),
        ).fetchall()
        return [_message(row, counter) for row in rows]

    def get_messages(self, tenant: str, message_ids: Sequence[str]) -> list[Message]:
        """Messages by id, in the order given (unknown ids skipped)."""
        found: dict[str, Message] = {}
        for chunk in _chunks(message_ids):
            marks = ",".join("?" * len(chunk))
            for row in self._c.execute(
                f"SELECT {_MESSAGE_COLUMNS} FROM {_MESSAGE_FROM}"
                f" WHERE m.tenant = ? AND m.id IN ({marks})",
                [tenant, *chunk],
            ):
                found[row[0]] = _message(row)
        return [found[m] for m in message_ids if m in found]

    def list_messages(
        self,
        tenant: str,
        agent_id: str,
        *,
        after: int,
        limit: int,
        roles: Sequence[str],
        start: float | None,
        end: float | None,
        newest_first: bool,
    ) -> list[tuple[int, Message]]:
        """A page of an agent's history; `after` is the last row key seen (0 to start)."""
        where = ["m.agent_id = ?", "m.tenant = ?"]
        params: list[Any] = [agent_id, tenant]
        if after:
            where.append("m.rowkey < ?" if newest_first else "m.rowkey > ?")
            params.append(after)
        if roles:
            where.append(f"m.role IN ({','.join('?' * len(roles))})")
            params.extend(roles)
        if start is not None:
            where.append("m.created_at >= ?")
            params.append(start)
        if end is not None:
            where.append("m.created_at < ?")
            params.append(end)
        order = "DESC" if newest_first else "ASC"
        rows = self._c.execute(
            f"SELECT {_MESSAGE_COLUMNS} FROM {_MESSAGE_FROM} WHERE {' AND '.join(where)}"
            f" ORDER BY m.rowkey {order} LIMIT ?",
            [*params, limit],
        ).fetchall()
        return [(row[10], _message(row)) for row in rows]

    def get_step(self, agent_id: str, step_id: str) -> StepRecord | None:
        """A committed step, or None."""
        row = self._c.execute(
            "SELECT request_hash, message_ids, context_version, created_at FROM steps"
            " WHERE agent_id = ? AND step_id = ?",
            (agent_id, step_id),
        ).fetchone()
        if row is None:
            return None
        return StepRecord(agent_id, step_id, row[0], tuple(json.loads(row[1])), row[2], row[3])

    def get_plan(self, tenant: str, plan_id: str) -> CompactionPlan | None:
        """A compaction plan, or None."""
        row = self._c.execute(
            "SELECT agent_id, base_context_version, message_ids, created_at, applied_at"
            " FROM compaction_plans WHERE plan_id = ? AND tenant = ?",
            (plan_id, tenant),
        ).fetchone()
        if row is None:
            return None
        return CompactionPlan(
            plan_id, tenant, row[0], row[1], tuple(json.loads(row[2])), row[3], row[4]
        )


class _Tx(_Reader):
    """Writes on the writer connection inside BEGIN IMMEDIATE ... COMMIT."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        super().__init__(conn)
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
        for chunk in _chunks(agent_ids):
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

    def add_archival(self, tenant: str, agent_id: str, count: int) -> None:
        """Counts archival records written for the agent."""
        self._c.execute(
            "UPDATE agents SET archival_count = archival_count + ? WHERE id = ? AND tenant = ?",
            (count, agent_id, tenant),
        )

    def save_prompts(self, prompts: Sequence[StoredPrompt]) -> None:
        """Stores compiled prompts, replacing earlier ones."""
        self._c.executemany(
            "INSERT OR REPLACE INTO agent_prompts (agent_id, system_prompt, compiled_memory,"
            " raw_hash, memory_revision, prompt_hash, system_tokens, memory_tokens, counter,"
            " built_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
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

    def set_window(self, agent_id: str, message_ids: Sequence[str]) -> None:
        """Replaces the whole window."""
        self._c.execute("DELETE FROM context_window WHERE agent_id = ?", (agent_id,))
        self.append_window(agent_id, 0, message_ids)

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


class SqliteStateStore:
    """State in `state.sqlite3`. Writes are serialized on one connection; each reading
    thread has its own read-only connection, so reads never wait for a writer (WAL).

    Inside `batch()` (group commit), each `transaction()` is a savepoint of one shared
    transaction: a failing unit of work rolls back alone, and the batch commits — one fsync —
    when its last unit is done. Events publish only after that commit.
    """

    def __init__(
        self, data_dir: Path, publish: Callable[[list[AgentEvent]], None] | None = None
    ) -> None:
        data_dir.mkdir(parents=True, exist_ok=True)
        self._path = data_dir / STATE_FILE
        self._writer = sqlite_util.connect(self._path)
        sqlite_util.migrate(self._writer, "state_service.store")
        self._write_lock = threading.Lock()
        self._local = threading.local()
        self._readers: list[sqlite3.Connection] = []
        self._readers_lock = threading.Lock()
        self._publish = publish
        self._batch_events: list[AgentEvent] | None = None
        self._batch_thread: int | None = None
        self._savepoints = 0

    def set_publisher(self, publish: Callable[[list[AgentEvent]], None]) -> None:
        """Where committed events go (the server's event hub)."""
        self._publish = publish

    def _in_batch(self) -> bool:
        return self._batch_thread == threading.get_ident()

    def reader(self) -> _Reader:
        """Queries on this thread's own connection (inside a batch: the batch's, so a unit
        of work reads what earlier units of the batch wrote)."""
        if self._in_batch():
            return _Reader(self._writer)
        reader: _Reader | None = getattr(self._local, "reader", None)
        if reader is None:
            conn = sqlite_util.connect(self._path, read_only=True)
            with self._readers_lock:
                self._readers.append(conn)
            reader = self._local.reader = _Reader(conn)
        return reader

    @contextmanager
    def batch(self) -> Iterator[None]:
        """One transaction for many units of work (group commit)."""
        with self._write_lock:
            self._writer.execute("BEGIN IMMEDIATE")
            self._batch_events = []
            self._batch_thread = threading.get_ident()
            try:
                yield
            except BaseException:
                self._writer.execute("ROLLBACK")
                raise
            else:
                self._writer.execute("COMMIT")
            finally:
                events, self._batch_events = self._batch_events, None
                self._batch_thread = None
        if events and self._publish is not None:
            self._publish(events)

    @contextmanager
    def transaction(self) -> Iterator[_Tx]:
        """A unit of work: BEGIN IMMEDIATE ... COMMIT, or a savepoint inside a batch."""
        if self._in_batch():
            self._savepoints += 1
            name = f"unit{self._savepoints}"
            tx = _Tx(self._writer)
            self._writer.execute(f"SAVEPOINT {name}")
            try:
                yield tx
            except BaseException:
                self._writer.execute(f"ROLLBACK TO {name}")
                self._writer.execute(f"RELEASE {name}")
                raise
            self._writer.execute(f"RELEASE {name}")
            assert self._batch_events is not None
            self._batch_events.extend(tx.events)
            return
        with self._write_lock:
            tx = _Tx(self._writer)
            self._writer.execute("BEGIN IMMEDIATE")
            try:
                yield tx
            except BaseException:
                self._writer.execute("ROLLBACK")
                raise
            self._writer.execute("COMMIT")
        if tx.events and self._publish is not None:
            self._publish(tx.events)

    def close(self) -> None:
        """Closes every connection."""
        with self._readers_lock:
            for conn in self._readers:
                conn.close()
            self._readers.clear()
        self._writer.close()
