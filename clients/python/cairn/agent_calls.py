"""The state service's methods on agents: create, read, list, update, delete, and agent
files (export and import).

Each function builds the call for the client method of the same name (`client.state.<name>`)
and its docstring documents that method. Every method takes `timeout`: seconds for the whole
call with its retries (for a list, for each page), the client's default when None. Reads and
exports are retried when the server is unavailable; the other calls are sent once.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from cairn import state_convert as convert
from cairn.calls import DEFAULT_PAGE_SIZE, Call, Paged, field_mask, paged
from cairn.enums import MemoryMode, MemoryUpdateMode
from cairn.protobuf_values import (
    MEMORY_MODE,
    MEMORY_UPDATE_MODE,
    to_struct,
)
from cairn.state_types import (
    Agent,
    AgentUpdate,
    BlockSpec,
    ImportedAgents,
    Tool,
    ToolRule,
)
from cairn.v1 import state_pb2

# --- agents ---------------------------------------------------------------------------------


def create_agent(
    name: str,
    *,
    system: str = "",
    model: str = "",
    context_window: int = 0,
    blocks: Sequence[BlockSpec] = (),
    block_ids: Sequence[str] = (),
    tools: Sequence[Tool] = (),
    tool_rules: Sequence[ToolRule] = (),
    tags: Sequence[str] = (),
    metadata: Mapping[str, Any] | None = None,
    memory_mode: MemoryMode = MemoryMode.STANDARD,
    memory_update_mode: MemoryUpdateMode = MemoryUpdateMode.SYSTEM_PROMPT,
    timeout: float | None = None,
) -> Call[Agent]:
    """Creates an agent with new `blocks` and existing `block_ids`, in that order, compiles
    its first prompt and returns it. `context_window` 0 means the server default (128000).
    Raises InvalidArgument (empty name, bad label or limit, a label twice, a malformed tool
    schema or rule) or NotFound (a block id names no block)."""
    request = state_pb2.CreateAgentRequest(
        name=name,
        system=system,
        model=model,
        context_window=context_window,
        memory_blocks=[convert.block_spec_pb(b) for b in blocks],
        block_ids=list(block_ids),
        tools=[convert.tool_pb(t) for t in tools],
        tool_rules=[convert.tool_rule_pb(r) for r in tool_rules],
        tags=list(tags),
        metadata=to_struct(metadata),
        memory_mode=MEMORY_MODE.encode(memory_mode),
        memory_update_mode=MEMORY_UPDATE_MODE.encode(memory_update_mode),
    )
    return Call(
        "state",
        "CreateAgent",
        request,
        lambda r: convert.agent(r.agent),
        idempotent=False,
        timeout=timeout,
    )


def get_agent(agent_id: str, *, timeout: float | None = None) -> Call[Agent]:
    """Returns the agent with its blocks in render order. Raises NotFound."""
    return Call(
        "state",
        "GetAgent",
        state_pb2.GetAgentRequest(agent_id=agent_id),
        lambda r: convert.agent(r.agent),
        idempotent=True,
        timeout=timeout,
    )


def list_agents(
    *,
    tags: Sequence[str] = (),
    match_all_tags: bool = False,
    name: str = "",
    page_size: int = DEFAULT_PAGE_SIZE,
    timeout: float | None = None,
) -> Paged[Agent]:
    """Iterates over agents in creation order (those with any of `tags`, or all of them with
    `match_all_tags`; only those called `name` when given), fetching `page_size` at a time."""
    return paged(
        "state",
        "ListAgents",
        lambda token: state_pb2.ListAgentsRequest(
            page_size=page_size,
            page_token=token,
            tags=list(tags),
            match_all_tags=match_all_tags,
            name=name,
        ),
        lambda r: [convert.agent(a) for a in r.agents],
        timeout,
    )


def update_agent(
    agent_id: str,
    *,
    name: str | None = None,
    system: str | None = None,
    model: str | None = None,
    context_window: int | None = None,
    tools: Sequence[Tool] | None = None,
    tool_rules: Sequence[ToolRule] | None = None,
    tags: Sequence[str] | None = None,
    metadata: Mapping[str, Any] | None = None,
    memory_update_mode: MemoryUpdateMode | None = None,
    expected_version: int | None = None,
    timeout: float | None = None,
) -> Call[AgentUpdate]:
    """Sets the fields given (those left None keep their value) and returns the agent, with
    `prompt_rebuilt` when a change to system or tool_rules recompiled its prompt. An update
    that changes nothing writes nothing. Raises InvalidArgument (no field given, a bad
    value), NotFound, or Aborted when `expected_version` is not the current version."""
    fields: list[tuple[str, object]] = [
        ("name", name),
        ("system", system),
        ("model", model),
        ("context_window", context_window),
        ("tools", tools),
        ("tool_rules", tool_rules),
        ("tags", tags),
        ("metadata", metadata),
        ("memory_update_mode", memory_update_mode),
    ]
    values = state_pb2.Agent(
        id=agent_id,
        name=name or "",
        system=system or "",
        model=model or "",
        context_window=context_window or 0,
        tools=[convert.tool_pb(t) for t in tools or ()],
        tool_rules=[convert.tool_rule_pb(r) for r in tool_rules or ()],
        tags=list(tags or ()),
        metadata=to_struct(metadata),
        memory_update_mode=MEMORY_UPDATE_MODE.encode(
            MemoryUpdateMode.UNSPECIFIED if memory_update_mode is None else memory_update_mode
        ),
    )
    request = state_pb2.UpdateAgentRequest(
        agent=values, update_mask=field_mask(fields), expected_version=expected_version
    )
    return Call(
        "state",
        "UpdateAgent",
        request,
        lambda r: AgentUpdate(convert.agent(r.agent), r.prompt_rebuilt),
        idempotent=False,
        timeout=timeout,
    )


def delete_agent(
    agent_id: str, *, expected_version: int | None = None, timeout: float | None = None
) -> Call[None]:
    """Deletes the agent; its blocks stay (they may be shared). Raises NotFound, or Aborted
    when `expected_version` is not the current version."""
    return Call(
        "state",
        "DeleteAgent",
        state_pb2.DeleteAgentRequest(agent_id=agent_id, expected_version=expected_version),
        lambda r: None,
        idempotent=False,
        timeout=timeout,
    )


# --- portability ----------------------------------------------------------------------------


def export_agent(agent_ids: Sequence[str], *, timeout: float | None = None) -> Call[str]:
    """Returns the agents as one JSON agent file (docs/agent-file.md); shared blocks appear
    once. Raises NotFound or InvalidArgument (no ids)."""
    return Call(
        "state",
        "ExportAgent",
        state_pb2.ExportAgentRequest(agent_ids=list(agent_ids)),
        lambda r: str(r.agent_file_json),
        idempotent=True,
        timeout=timeout,
    )


def import_agent(agent_file_json: str, *, timeout: float | None = None) -> Call[ImportedAgents]:
    """Imports an agent file with fresh ids and returns the agents and old id -> new id.
    Raises InvalidArgument (not an agent file, or invalid contents)."""
    return Call(
        "state",
        "ImportAgent",
        state_pb2.ImportAgentRequest(agent_file_json=agent_file_json),
        lambda r: ImportedAgents(tuple(convert.agent(a) for a in r.agents), dict(r.id_map)),
        idempotent=False,
        timeout=timeout,
    )
