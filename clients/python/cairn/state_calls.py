"""The state service's methods: agents, blocks, compiled contexts, steps, memory tools,
compaction, export and import (MemFS is in `memfs_calls`).

Each function builds the call for the client method of the same name (`client.state.<name>`)
and its docstring documents that method. Every method takes `timeout` (seconds, for the whole
call with its retries; the client's default when None). Reads and `commit_step` are retried
when the server is unavailable; other writes are sent once.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from google.protobuf import field_mask_pb2

from cairn import state_convert as convert
from cairn.calls import Call, Paged, Streamed, paged
from cairn.enums import ContextView, MemoryMode, MemoryUpdateMode, MessageRole
from cairn.protobuf_values import (
    CONTEXT_VIEW,
    MEMORY_MODE,
    MEMORY_UPDATE_MODE,
    MESSAGE_ROLE,
    json_text,
    to_struct,
    to_timestamp,
)
from cairn.state_types import (
    Agent,
    AgentEvent,
    AgentUpdate,
    AppliedCompaction,
    Block,
    BlockSpec,
    BlockUpdate,
    CommittedStep,
    CompactionPlan,
    CompiledContext,
    ImportedAgents,
    MemoryToolResult,
    Message,
    Tool,
    ToolRule,
)
from cairn.v1 import common_pb2, state_pb2

DEFAULT_PAGE_SIZE = 100


def _mask(fields: Iterable[tuple[str, object]]) -> field_mask_pb2.FieldMask:
    """A field mask naming the fields that were given (not None)."""
    return field_mask_pb2.FieldMask(paths=[name for name, value in fields if value is not None])


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
        agent=values, update_mask=_mask(fields), expected_version=expected_version
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


# --- blocks ---------------------------------------------------------------------------------


def create_block(
    label: str,
    value: str = "",
    *,
    limit: int = 0,
    description: str = "",
    read_only: bool = False,
    hidden: bool = False,
    tags: Sequence[str] = (),
    metadata: Mapping[str, Any] | None = None,
    timeout: float | None = None,
) -> Call[Block]:
    """Creates a standalone block, ready to attach to agents (`limit` 0: 20000 characters).
    Raises InvalidArgument (a label that is empty or not tag-safe, a value longer than the
    limit)."""
    spec = BlockSpec(
        label, value, limit, description, read_only, hidden, tuple(tags), dict(metadata or {})
    )
    return Call(
        "state",
        "CreateBlock",
        state_pb2.CreateBlockRequest(block=convert.block_spec_pb(spec)),
        lambda r: convert.block(r.block),
        idempotent=False,
        timeout=timeout,
    )


def get_block(block_id: str, *, timeout: float | None = None) -> Call[Block]:
    """Returns the block. Raises NotFound."""
    return Call(
        "state",
        "GetBlock",
        state_pb2.GetBlockRequest(block_id=block_id),
        lambda r: convert.block(r.block),
        idempotent=True,
        timeout=timeout,
    )


def list_blocks(
    *,
    label: str = "",
    tags: Sequence[str] = (),
    match_all_tags: bool = False,
    page_size: int = DEFAULT_PAGE_SIZE,
    timeout: float | None = None,
) -> Paged[Block]:
    """Iterates over blocks in creation order, only those labelled `label` when given, and
    with any (or all, with `match_all_tags`) of `tags`."""
    return paged(
        "state",
        "ListBlocks",
        lambda token: state_pb2.ListBlocksRequest(
            page_size=page_size,
            page_token=token,
            label=label,
            tags=list(tags),
            match_all_tags=match_all_tags,
        ),
        lambda r: [convert.block(b) for b in r.blocks],
        timeout,
    )


def update_block(
    block_id: str,
    *,
    label: str | None = None,
    value: str | None = None,
    limit: int | None = None,
    description: str | None = None,
    read_only: bool | None = None,
    hidden: bool | None = None,
    tags: Sequence[str] | None = None,
    metadata: Mapping[str, Any] | None = None,
    expected_version: int | None = None,
    timeout: float | None = None,
) -> Call[BlockUpdate]:
    """Sets the fields given (those left None keep their value). A change to a field the
    prompt shows rebuilds the prompt of every agent the block is attached to, in the same
    transaction; the result names them. Raises InvalidArgument, NotFound, AlreadyExists (the
    new label is taken on an attached agent), or Aborted when `expected_version` is stale."""
    fields: list[tuple[str, object]] = [
        ("label", label),
        ("value", value),
        ("limit", limit),
        ("description", description),
        ("read_only", read_only),
        ("hidden", hidden),
        ("tags", tags),
        ("metadata", metadata),
    ]
    values = state_pb2.Block(
        id=block_id,
        label=label or "",
        value=value or "",
        limit=limit or 0,
        description=description or "",
        read_only=bool(read_only),
        hidden=bool(hidden),
        tags=list(tags or ()),
        metadata=to_struct(metadata),
    )
    request = state_pb2.UpdateBlockRequest(
        block=values, update_mask=_mask(fields), expected_version=expected_version
    )
    return Call(
        "state",
        "UpdateBlock",
        request,
        lambda r: BlockUpdate(
            convert.block(r.block), tuple(r.affected_agent_ids), tuple(r.rebuilt_agent_ids)
        ),
        idempotent=False,
        timeout=timeout,
    )


def delete_block(
    block_id: str,
    *,
    force: bool = False,
    expected_version: int | None = None,
    timeout: float | None = None,
) -> Call[list[str]]:
    """Deletes a block and returns the agents it was detached from (with `force`). Raises
    FailedPrecondition (attached and not `force`), NotFound, or Aborted."""
    return Call(
        "state",
        "DeleteBlock",
        state_pb2.DeleteBlockRequest(
            block_id=block_id, force=force, expected_version=expected_version
        ),
        lambda r: list(r.detached_agent_ids),
        idempotent=False,
        timeout=timeout,
    )


def attach_block(
    agent_id: str,
    block_id: str,
    *,
    position: int | None = None,
    expected_version: int | None = None,
    timeout: float | None = None,
) -> Call[Agent]:
    """Attaches a block to an agent at `position` (0-based; the end when None) and returns
    the agent. Raises NotFound, AlreadyExists (attached already, or the label is taken),
    InvalidArgument (position out of range), or Aborted (the agent's version)."""
    return Call(
        "state",
        "AttachBlock",
        state_pb2.AttachBlockRequest(
            agent_id=agent_id,
            block_id=block_id,
            position=position,
            expected_version=expected_version,
        ),
        lambda r: convert.agent(r.agent),
        idempotent=False,
        timeout=timeout,
    )


def detach_block(
    agent_id: str,
    block_id: str,
    *,
    expected_version: int | None = None,
    timeout: float | None = None,
) -> Call[Agent]:
    """Detaches a block from an agent (the block stays) and returns the agent. Raises
    NotFound or Aborted."""
    return Call(
        "state",
        "DetachBlock",
        state_pb2.DetachBlockRequest(
            agent_id=agent_id, block_id=block_id, expected_version=expected_version
        ),
        lambda r: convert.agent(r.agent),
        idempotent=False,
        timeout=timeout,
    )


def reorder_blocks(
    agent_id: str,
    block_ids: Sequence[str],
    *,
    expected_version: int | None = None,
    timeout: float | None = None,
) -> Call[Agent]:
    """Sets the render order of the agent's blocks (a permutation of the attached ones) and
    returns the agent. Raises InvalidArgument, NotFound or Aborted."""
    return Call(
        "state",
        "ReorderBlocks",
        state_pb2.ReorderBlocksRequest(
            agent_id=agent_id, block_ids=list(block_ids), expected_version=expected_version
        ),
        lambda r: convert.agent(r.agent),
        idempotent=False,
        timeout=timeout,
    )


# --- context and steps ----------------------------------------------------------------------


def compile_context(
    agent_id: str,
    *,
    force_recompile: bool = False,
    view: ContextView = ContextView.FULL,
    timeout: float | None = None,
) -> Call[CompiledContext]:
    """Returns the agent's context for its next model call: system prompt (the stored one
    when still current), in-context messages, tools and token account. `view=PROMPT` leaves
    out `compiled_memory`. Raises NotFound."""
    return Call(
        "state",
        "CompileContext",
        state_pb2.CompileContextRequest(
            agent_id=agent_id, force_recompile=force_recompile, view=CONTEXT_VIEW.encode(view)
        ),
        convert.compiled_context,
        idempotent=True,
        timeout=timeout,
    )


def watch_agent(agent_id: str, *, timeout: float | None = None) -> Streamed[AgentEvent]:
    """Iterates over the agent's events as they happen, starting with WATCH_STARTED, until
    you stop iterating (no deadline unless `timeout` is given). Raises NotFound (also when
    the agent is deleted) or ResourceExhausted (the watcher fell behind: watch again)."""
    return Streamed(
        "state",
        "WatchAgent",
        state_pb2.WatchAgentRequest(agent_id=agent_id),
        convert.agent_event,
        timeout=timeout,
    )


def commit_step(
    agent_id: str,
    messages: Sequence[Message],
    *,
    base_context_version: int,
    step_id: str | None = None,
    acknowledged_memory_revision: str = "",
    timeout: float | None = None,
) -> Call[CommittedStep]:
    """Appends a completed step's messages to the window, all or nothing, and returns them
    with their ids. `step_id` (generated when None) makes the call safe to retry: a step
    committed before returns its first result with `replayed` set. Raises InvalidArgument,
    NotFound, Aborted (`base_context_version` is stale) or AlreadyExists (the step id was
    committed with other messages)."""
    key = step_id if step_id is not None else f"step-{uuid.uuid4()}"
    return Call(
        "state",
        "CommitStep",
        state_pb2.CommitStepRequest(
            agent_id=agent_id,
            step_id=key,
            base_context_version=base_context_version,
            messages=[convert.message_pb(m) for m in messages],
            acknowledged_memory_revision=acknowledged_memory_revision,
        ),
        lambda r: CommittedStep(
            key, tuple(convert.message(m) for m in r.messages), r.context_version, r.replayed
        ),
        idempotent=True,
        timeout=timeout,
    )


def list_messages(
    agent_id: str,
    *,
    roles: Sequence[MessageRole] = (),
    start: datetime | None = None,
    end: datetime | None = None,
    newest_first: bool = False,
    page_size: int = DEFAULT_PAGE_SIZE,
    timeout: float | None = None,
) -> Paged[Message]:
    """Iterates over the agent's whole history (in context or not), oldest first unless
    `newest_first`, only `roles` when given, committed in [start, end) when given."""
    time_range = (
        common_pb2.TimeRange(
            start=to_timestamp(start) if start else None, end=to_timestamp(end) if end else None
        )
        if start or end
        else None
    )
    return paged(
        "state",
        "ListMessages",
        lambda token: state_pb2.ListMessagesRequest(
            agent_id=agent_id,
            page_size=page_size,
            page_token=token,
            roles=[MESSAGE_ROLE.encode(r) for r in roles],
            time_range=time_range,
            newest_first=newest_first,
        ),
        lambda r: [convert.message(m) for m in r.messages],
        timeout,
    )


def execute_memory_tool(
    agent_id: str,
    tool_name: str,
    arguments: str | Mapping[str, Any],
    *,
    timeout: float | None = None,
) -> Call[MemoryToolResult]:
    """Runs a memory tool call the model made; `arguments` is the model's JSON text (or a
    dict). A refused call is not an error: `ok` is False, `result` explains it to the model,
    and nothing changed. Raises NotFound (no such agent)."""
    text = arguments if isinstance(arguments, str) else json_text(arguments)
    return Call(
        "state",
        "ExecuteMemoryTool",
        state_pb2.ExecuteMemoryToolRequest(
            agent_id=agent_id, tool_name=tool_name, arguments_json=text
        ),
        convert.memory_tool_result,
        idempotent=False,
        timeout=timeout,
    )


# --- compaction -----------------------------------------------------------------------------


def plan_compaction(
    agent_id: str, *, target_share: float | None = None, timeout: float | None = None
) -> Call[CompactionPlan]:
    """Picks the oldest in-context messages to evict so the context falls below
    `target_share` of the window (server default 0.5) and returns them to summarise. Raises
    NotFound, InvalidArgument, or FailedPrecondition (below the target already, or no cut
    point)."""
    return Call(
        "state",
        "PlanCompaction",
        state_pb2.PlanCompactionRequest(agent_id=agent_id, target_share=target_share),
        lambda r: CompactionPlan(
            r.plan_id,
            tuple(convert.message(m) for m in r.messages),
            r.base_context_version,
            r.tokens_before,
            r.tokens_after,
        ),
        idempotent=False,
        timeout=timeout,
    )


def apply_compaction(
    agent_id: str, plan_id: str, summary: str, *, timeout: float | None = None
) -> Call[AppliedCompaction]:
    """Replaces the plan's messages with one summary message, atomically. Raises NotFound,
    InvalidArgument (empty summary), Aborted (the window moved since the plan) or
    FailedPrecondition (applied already)."""
    return Call(
        "state",
        "ApplyCompaction",
        state_pb2.ApplyCompactionRequest(agent_id=agent_id, plan_id=plan_id, summary=summary),
        lambda r: AppliedCompaction(
            convert.message(r.summary_message), r.context_version, convert.tokens(r.tokens)
        ),
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
