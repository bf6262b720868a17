"""Queries of the SQL state stores (SQLite and PostgreSQL alike)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from cairn_server.sqldb import Db
from state_service.models import (
    Agent,
    Block,
    CompactionPlan,
    Forward,
    MemoryUpdateMode,
    Message,
    PromptState,
    StepRecord,
    StoredPrompt,
)
from state_service.store.sql_rows import (
    AGENT_COLUMNS,
    AGENT_ROWKEY,
    BLOCK_COLUMNS,
    MESSAGE_COLUMNS,
    MESSAGE_FROM,
    agent_row,
    block_row,
    chunks,
    message_row,
    tag_filter,
)


class SqlReader:
    """Queries over one connection. Inside a transaction, reads of rows the transaction may
    change take row locks (`_lock`: FOR UPDATE on PostgreSQL)."""

    _lock = ""

    def __init__(self, db: Db) -> None:
        self._c = db

    # --- agents and blocks ---------------------------------------------------------------

    def _blocks_of(self, agent_ids: Sequence[str]) -> dict[str, list[Block]]:
        result: dict[str, list[Block]] = {agent_id: [] for agent_id in agent_ids}
        for chunk in chunks(agent_ids):
            marks = ",".join("?" * len(chunk))
            rows = self._c.execute(
                f"SELECT ab.agent_id, {BLOCK_COLUMNS} FROM agent_blocks ab"
                f" JOIN blocks b ON b.id = ab.block_id WHERE ab.agent_id IN ({marks})"
                " ORDER BY ab.agent_id, ab.position",
                chunk,
            ).fetchall()
            for row in rows:
                result[row[0]].append(block_row(row[1:]))
        return result

    def _windows_of(self, agent_ids: Sequence[str]) -> dict[str, list[str]]:
        result: dict[str, list[str]] = {agent_id: [] for agent_id in agent_ids}
        for chunk in chunks(agent_ids):
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
        """The agent's own fields only: no blocks, an empty `message_ids`."""
        row = self._c.execute(
            f"SELECT {AGENT_COLUMNS} FROM agents WHERE tenant = ? AND id = ?{self._lock}",
            (tenant, agent_id),
        ).fetchone()
        return None if row is None else agent_row(row, [], [])

    def load_agents(
        self, tenant: str, agent_ids: Sequence[str], windows: bool = True
    ) -> list[Agent]:
        """Agents with their blocks, in the order of `agent_ids`; without `windows`, their
        `message_ids` stay empty (a fan-out needs only `window_size`)."""
        rows: dict[str, Sequence[Any]] = {}
        for chunk in chunks(agent_ids):
            marks = ",".join("?" * len(chunk))
            for row in self._c.execute(
                f"SELECT {AGENT_COLUMNS} FROM agents WHERE tenant = ? AND id IN ({marks})"
                f" ORDER BY id{self._lock}",
                [tenant, *chunk],
            ):
                rows[row[0]] = row
        found = [agent_id for agent_id in agent_ids if agent_id in rows]
        blocks = self._blocks_of(found)
        ids = self._windows_of(found) if windows else {a: [] for a in found}
        return [agent_row(rows[a], blocks[a], ids[a]) for a in found]

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
        where, params = tag_filter("agent_tags", "agent_id", tags, match_all_tags)
        if name:
            where += " AND name = ?"
            params.append(name)
        rows = self._c.execute(
            f"SELECT {AGENT_COLUMNS} FROM agents WHERE tenant = ? AND rowkey > ?{where}"
            " ORDER BY rowkey LIMIT ?",
            [tenant, after, *params, limit],
        ).fetchall()
        ids = [row[0] for row in rows]
        blocks = self._blocks_of(ids)
        windows = self._windows_of(ids)
        return [
            (row[AGENT_ROWKEY], agent_row(row, blocks[row[0]], windows[row[0]])) for row in rows
        ]

    def get_block(self, tenant: str, block_id: str) -> Block | None:
        """The block, or None."""
        row = self._c.execute(
            f"SELECT {BLOCK_COLUMNS} FROM blocks b WHERE b.tenant = ? AND b.id = ?{self._lock}",
            (tenant, block_id),
        ).fetchone()
        return None if row is None else block_row(row)

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
        where, params = tag_filter("block_tags", "block_id", tags, match_all_tags)
        if label:
            where += " AND label = ?"
            params.append(label)
        rows = self._c.execute(
            f"SELECT {BLOCK_COLUMNS} FROM blocks b WHERE tenant = ? AND rowkey > ?{where}"
            " ORDER BY rowkey LIMIT ?",
            [tenant, after, *params, limit],
        ).fetchall()
        return [(row[13], block_row(row)) for row in rows]

    def get_prompt_state(self, tenant: str, agent_id: str) -> PromptState | None:
        """The compile cache's keys and entry for one agent, in one read."""
        row = self._c.execute(
            "SELECT a.system_hash, a.memory_revision, a.memory_update_mode, a.context_window,"
            " a.tools_tokens, a.tools_counter, a.context_version, a.delivered_revision,"
            " a.tools_json, a.memory_head, p.system_prompt, p.compiled_memory, p.raw_hash,"
            " p.memory_revision, p.prompt_hash, p.system_tokens, p.memory_tokens, p.counter,"
            " p.built_at"
            " FROM agents a LEFT JOIN agent_prompts p ON p.agent_id = a.id"
            " WHERE a.tenant = ? AND a.id = ?",
            (tenant, agent_id),
        ).fetchone()
        if row is None:
            return None
        prompt = None
        if row[10] is not None:
            prompt = StoredPrompt(agent_id, *row[10:19])
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
            memory_head=row[9],
        )

    def get_context_key(self, tenant: str, agent_id: str) -> tuple[object, ...] | None:
        """Everything a compiled context depends on, without its texts: equal keys mean an
        equal context, so a cached one can be served after this one light read."""
        row = self._c.execute(
            "SELECT a.system_hash, a.memory_revision, a.memory_update_mode, a.context_window,"
            " a.tools_counter, a.context_version, a.delivered_revision, a.memory_head,"
            " a.version, p.prompt_hash, p.memory_revision, p.counter, p.raw_hash"
            " FROM agents a LEFT JOIN agent_prompts p ON p.agent_id = a.id"
            " WHERE a.tenant = ? AND a.id = ?",
            (tenant, agent_id),
        ).fetchone()
        return None if row is None else tuple(row)

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
            f"SELECT {MESSAGE_COLUMNS} FROM context_window w"
            " JOIN messages m ON m.id = w.message_id"
            " LEFT JOIN agent_prompts p ON p.agent_id = m.agent_id AND w.position = 0"
            " WHERE w.agent_id = ? AND m.tenant = ? ORDER BY w.position",
            (agent_id, tenant),
        ).fetchall()
        return [message_row(row, counter) for row in rows]

    def get_messages(self, tenant: str, message_ids: Sequence[str]) -> list[Message]:
        """Messages by id, in the order given (unknown ids skipped)."""
        found: dict[str, Message] = {}
        for chunk in chunks(message_ids):
            marks = ",".join("?" * len(chunk))
            for row in self._c.execute(
                f"SELECT {MESSAGE_COLUMNS} FROM {MESSAGE_FROM}"
                f" WHERE m.tenant = ? AND m.id IN ({marks})",
                [tenant, *chunk],
            ):
                found[row[0]] = message_row(row)
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
            f"SELECT {MESSAGE_COLUMNS} FROM {MESSAGE_FROM} WHERE {' AND '.join(where)}"
            f" ORDER BY m.rowkey {order} LIMIT ?",
            [*params, limit],
        ).fetchall()
        return [(row[10], message_row(row)) for row in rows]

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

    def revision_counter(self, agent_id: str, revision: str) -> int | None:
        """The memory counter of a MEMFS revision (commit id), or None."""
        row = self._c.execute(
            "SELECT counter FROM memory_revisions WHERE agent_id = ? AND revision = ?",
            (agent_id, revision),
        ).fetchone()
        return None if row is None else int(row[0])

    def pending_forwards(self, limit: int) -> list[Forward]:
        """The oldest messages waiting to be forwarded to recall (not given up on)."""
        rows = self._c.execute(
            f"SELECT o.id, o.tenant, o.attempts, {MESSAGE_COLUMNS} FROM recall_outbox o"
            " JOIN messages m ON m.id = o.message_id"
            " LEFT JOIN agents a ON a.id = m.agent_id"
            " LEFT JOIN agent_prompts p ON p.agent_id = m.agent_id AND m.id = a.system_message_id"
            " WHERE o.failed_at IS NULL ORDER BY o.id LIMIT ?",
            (limit,),
        ).fetchall()
        return [Forward(row[0], row[1], row[4], message_row(row[3:]), row[2]) for row in rows]

    def get_plan(self, tenant: str, plan_id: str) -> CompactionPlan | None:
        """A compaction plan, or None."""
        row = self._c.execute(
            "SELECT agent_id, base_context_version, message_ids, created_at, applied_at"
            f" FROM compaction_plans WHERE plan_id = ? AND tenant = ?{self._lock}",
            (plan_id, tenant),
        ).fetchone()
        if row is None:
            return None
        return CompactionPlan(
            plan_id, tenant, row[0], row[1], tuple(json.loads(row[2])), row[3], row[4]
        )
