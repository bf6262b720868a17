"""Row layouts of the SQL state stores and their mapping to domain objects."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import Any

from state_service.models import Agent, Block, MemoryMode, MemoryUpdateMode, Message, Role
from state_service.store.codec import calls_from_json, rules_from_json, tools_from_json

CHUNK = 500

AGENT_COLUMNS = (
    "id, tenant, name, system, model, context_window, tools, tool_rules, tags, metadata,"
    " memory_mode, memory_update_mode, context_version, memory_revision, memory_updated_at,"
    " version, created_at, updated_at, system_message_id, message_count, archival_count,"
    " delivered_revision, memory_head, window_size, rowkey"
)
AGENT_ROWKEY = 24
BLOCK_COLUMNS = (
    "b.id, b.tenant, b.label, b.value, b.char_limit, b.description, b.read_only, b.hidden,"
    " b.tags, b.metadata, b.version, b.created_at, b.updated_at, b.rowkey"
)
# The system message's content is the agent's stored prompt, read at query time.
MESSAGE_COLUMNS = (
    "m.id, m.agent_id, m.role,"
    " CASE WHEN p.agent_id IS NOT NULL THEN p.system_prompt ELSE m.content END,"
    " m.tool_calls, m.tool_call_id, m.name, m.step_id, m.created_at, m.tokens, m.rowkey,"
    " m.counter"
)
# Only the agent's own system message (window position 0) joins its prompt.
MESSAGE_FROM = (
    "messages m LEFT JOIN agents a ON a.id = m.agent_id"
    " LEFT JOIN agent_prompts p ON p.agent_id = m.agent_id AND m.id = a.system_message_id"
)


def block_row(row: Sequence[Any]) -> Block:
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


def agent_row(row: Sequence[Any], blocks: list[Block], window: list[str]) -> Agent:
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
        memory_head=row[22],
        window_size=row[23],
        blocks=blocks,
        message_ids=window,
    )


def message_row(row: Sequence[Any], counter: str | None = None) -> Message:
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


def tag_filter(table: str, key: str, tags: Sequence[str], match_all: bool) -> tuple[str, list[Any]]:
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


def chunks(items: Sequence[str]) -> Iterator[Sequence[str]]:
    for start in range(0, len(items), CHUNK):
        yield items[start : start + CHUNK]
