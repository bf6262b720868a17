"""The memory tools the recall service answers: archival memory and conversation search."""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from datetime import UTC, date, datetime, timedelta
from typing import Any

import grpc

from cairn_server.auth import Principal
from cairn_server.runner import Runner
from state_service.core import Deps
from state_service.memory_tools import RecallCall, ToolError
from state_service.recall_link import (
    Found,
    RecallError,
    RecallLink,
    SearchScope,
    archival_stream,
    messages_stream,
)
from state_service.tool_calls import ToolResult, recall_not_configured

DEFAULT_TOP_K = 10


class BadSearch(ValueError):
    """The model's search arguments cannot be searched; the message says why."""


def _instant(text: str, name: str, *, end: bool) -> datetime:
    """An inclusive ISO 8601 bound as a half-open one: a date covers its whole day, a
    datetime its microsecond; a time without a zone is UTC."""
    raw = text.strip()
    try:
        if len(raw) == 10:
            day = date.fromisoformat(raw)
            moment = datetime(day.year, day.month, day.day, tzinfo=UTC)
            return moment + timedelta(days=1) if end else moment
        moment = datetime.fromisoformat(raw)
    except ValueError:
        raise BadSearch(
            f"'{name}' must be an ISO 8601 date (2026-11-30) or datetime "
            f"(2026-11-30T14:00:00Z), not {text!r}"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment + timedelta(microseconds=1) if end else moment


def search_scope(arguments: Mapping[str, Any], count: str, tags: tuple[str, ...]) -> SearchScope:
    """The search a recall tool's (schema-checked) arguments ask for."""
    query = str(arguments["query"]).strip()
    if not query:
        raise BadSearch("'query' must say what to look for")
    start = (
        _instant(str(arguments["start"]), "start", end=False) if arguments.get("start") else None
    )
    end = _instant(str(arguments["end"]), "end", end=True) if arguments.get("end") else None
    if start is not None and end is not None and start >= end:
        raise BadSearch("'start' must not be after 'end'")
    return SearchScope(
        query=query,
        top_k=int(arguments.get(count) or DEFAULT_TOP_K),
        tags_any=tags,
        start=start,
        end=end,
    )


def _when(found: Found) -> str:
    stamp = found.metadata.get("created_at")
    if isinstance(stamp, str) and stamp:
        return stamp
    return found.created_at.isoformat().replace("+00:00", "Z")


def archival_results(found: list[Found]) -> str:
    """What archival_memory_search tells the model: the passages, best first."""
    if not found:
        return "No passages in archival memory match."
    rows = [{"timestamp": _when(f), "content": f.content, "tags": list(f.tags)} for f in found]
    return json.dumps(rows, ensure_ascii=False)


def conversation_results(found: list[Found]) -> str:
    """What conversation_search tells the model: the messages, best first."""
    if not found:
        return "No messages in your conversation history match."
    rows = [
        {"timestamp": _when(f), "role": str(f.metadata.get("role", "")), "content": f.content}
        for f in found
    ]
    return json.dumps(rows, ensure_ascii=False)


async def run_recall_tool(
    deps: Deps,
    runner: Runner,
    link: RecallLink | None,
    principal: Principal,
    agent_id: str,
    call: RecallCall,
    memory_revision: str,
) -> ToolResult:
    """Runs a recall tool call for the agent; failures are refusals the model can read."""
    if link is None or not link.credentials.serves(principal.tenant):
        return recall_not_configured(call, memory_revision)
    if call.tool == "archival_memory_insert":
        content = str(call.arguments["content"])
        if not content.strip():
            return ToolResult(
                False,
                "Error: archival_memory_insert needs a non-empty 'content'; nothing was stored.",
                ToolError.INVALID_ARGUMENTS,
                memory_revision=memory_revision,
            )
        tags = [str(tag) for tag in call.arguments.get("tags") or []]
        try:
            seq = await link.archival_insert(
                principal.tenant, agent_id, content, tags, f"archival-{uuid.uuid4()}"
            )
        except RecallError as error:
            return ToolResult(
                False,
                f"Error: the recall service could not store the passage ({error.code.name}: "
                f"{error.details}); nothing was stored. Try again later.",
                ToolError.RECALL_FAILED,
                memory_revision=memory_revision,
            )
        await runner.write(_count_archival, deps, principal.tenant, agent_id)
        return ToolResult(
            True,
            f"Stored the passage in archival memory (record {seq} of your archival stream).",
            memory_revision=memory_revision,
        )
    return await _search(link, principal.tenant, agent_id, call, memory_revision)


async def _search(
    link: RecallLink, tenant: str, agent_id: str, call: RecallCall, memory_revision: str
) -> ToolResult:
    archival = call.tool == "archival_memory_search"
    args = call.arguments
    try:
        if archival:
            scope = search_scope(args, "top_k", tuple(str(t) for t in args.get("tags") or ()))
        else:
            roles = tuple(f"role:{r}" for r in args.get("roles") or ())
            scope = search_scope(args, "limit", roles)
    except BadSearch as error:
        return ToolResult(
            False,
            f"Error: {call.tool}: {error}; nothing was searched.",
            ToolError.INVALID_ARGUMENTS,
            memory_revision=memory_revision,
        )
    stream = archival_stream(agent_id) if archival else messages_stream(agent_id)
    try:
        found = await link.search(tenant, stream, scope)
    except RecallError as error:
        if error.code is grpc.StatusCode.INVALID_ARGUMENT:
            return ToolResult(
                False,
                f"Error: {call.tool}: {error.details}; nothing was searched.",
                ToolError.INVALID_ARGUMENTS,
                memory_revision=memory_revision,
            )
        return ToolResult(
            False,
            f"Error: the recall service could not search ({error.code.name}: {error.details}); "
            "nothing was searched. Try again later.",
            ToolError.RECALL_FAILED,
            memory_revision=memory_revision,
        )
    text = archival_results(found) if archival else conversation_results(found)
    return ToolResult(True, text, memory_revision=memory_revision)


def _count_archival(deps: Deps, tenant: str, agent_id: str) -> None:
    with deps.store.transaction() as tx:
        tx.add_archival(tenant, agent_id, 1)
