"""Protobuf <-> domain conversions for the state service. Only servicers use this module."""

from __future__ import annotations

import json
from typing import Any

from google.protobuf import json_format, struct_pb2, timestamp_pb2

from cairn.v1 import state_pb2
from cairn_server.errors import InvalidArgument
from state_service.blocks import BlockUpdate
from state_service.context import CompiledContext, ContextStatus
from state_service.models import (
    Agent,
    AgentEvent,
    Block,
    EventKind,
    MemoryMode,
    MemoryUpdateMode,
    Tool,
    ToolRule,
    ToolRuleType,
)

_MEMORY_MODES = {
    state_pb2.MEMORY_MODE_UNSPECIFIED: MemoryMode.STANDARD,
    state_pb2.MEMORY_MODE_STANDARD: MemoryMode.STANDARD,
    state_pb2.MEMORY_MODE_LINE_NUMBERED: MemoryMode.LINE_NUMBERED,
    state_pb2.MEMORY_MODE_MEMFS: MemoryMode.MEMFS,
}
_MEMORY_MODES_PB = {
    MemoryMode.STANDARD: state_pb2.MEMORY_MODE_STANDARD,
    MemoryMode.LINE_NUMBERED: state_pb2.MEMORY_MODE_LINE_NUMBERED,
    MemoryMode.MEMFS: state_pb2.MEMORY_MODE_MEMFS,
}
_UPDATE_MODES = {
    state_pb2.MEMORY_UPDATE_MODE_UNSPECIFIED: MemoryUpdateMode.SYSTEM_PROMPT,
    state_pb2.MEMORY_UPDATE_MODE_SYSTEM_PROMPT: MemoryUpdateMode.SYSTEM_PROMPT,
    state_pb2.MEMORY_UPDATE_MODE_MESSAGE: MemoryUpdateMode.MESSAGE,
}
_UPDATE_MODES_PB = {
    MemoryUpdateMode.SYSTEM_PROMPT: state_pb2.MEMORY_UPDATE_MODE_SYSTEM_PROMPT,
    MemoryUpdateMode.MESSAGE: state_pb2.MEMORY_UPDATE_MODE_MESSAGE,
}
_RULE_TYPES = {
    state_pb2.TOOL_RULE_TYPE_RUN_FIRST: ToolRuleType.RUN_FIRST,
    state_pb2.TOOL_RULE_TYPE_EXIT_LOOP: ToolRuleType.EXIT_LOOP,
    state_pb2.TOOL_RULE_TYPE_CONTINUE_LOOP: ToolRuleType.CONTINUE_LOOP,
    state_pb2.TOOL_RULE_TYPE_CONSTRAIN_CHILD_TOOLS: ToolRuleType.CONSTRAIN_CHILD_TOOLS,
    state_pb2.TOOL_RULE_TYPE_MAX_COUNT_PER_STEP: ToolRuleType.MAX_COUNT_PER_STEP,
    state_pb2.TOOL_RULE_TYPE_PARENT_LAST_TOOL: ToolRuleType.PARENT_LAST_TOOL,
    state_pb2.TOOL_RULE_TYPE_REQUIRED_BEFORE_EXIT: ToolRuleType.REQUIRED_BEFORE_EXIT,
    state_pb2.TOOL_RULE_TYPE_CONDITIONAL: ToolRuleType.CONDITIONAL,
}
_RULE_TYPES_PB = {v: k for k, v in _RULE_TYPES.items()}
_STATUS_PB = {
    ContextStatus.OK: state_pb2.CONTEXT_STATUS_OK,
    ContextStatus.NEEDS_COMPACTION: state_pb2.CONTEXT_STATUS_NEEDS_COMPACTION,
    ContextStatus.OVERFLOW_IN_SYSTEM_PROMPT: (
        state_pb2.CONTEXT_STATUS_CONTEXT_WINDOW_OVERFLOW_IN_SYSTEM_PROMPT
    ),
}
_EVENTS_PB = {
    EventKind.BLOCK_UPDATED: state_pb2.EVENT_TYPE_BLOCK_UPDATED,
    EventKind.PROMPT_REBUILT: state_pb2.EVENT_TYPE_PROMPT_REBUILT,
    EventKind.BLOCKS_CHANGED: state_pb2.EVENT_TYPE_BLOCKS_CHANGED,
    EventKind.AGENT_UPDATED: state_pb2.EVENT_TYPE_AGENT_UPDATED,
}


def timestamp(epoch: float) -> timestamp_pb2.Timestamp:
    """A protobuf Timestamp from seconds since the epoch."""
    ts = timestamp_pb2.Timestamp()
    ts.FromNanoseconds(round(epoch * 1e9))
    return ts


def struct_to_dict(value: struct_pb2.Struct) -> dict[str, Any]:
    """A Struct as a plain dict."""
    return json_format.MessageToDict(value)


def dict_to_struct(value: dict[str, Any]) -> struct_pb2.Struct:
    """A plain dict as a Struct."""
    struct = struct_pb2.Struct()
    struct.update(value)
    return struct


def memory_mode(value: int) -> MemoryMode:
    """A MemoryMode from its protobuf value."""
    try:
        return _MEMORY_MODES[value]  # type: ignore[index]
    except KeyError:
        raise InvalidArgument("memory_mode", f"unknown value {value}") from None


def update_mode(field: str, value: int) -> MemoryUpdateMode:
    """A MemoryUpdateMode from its protobuf value."""
    try:
        return _UPDATE_MODES[value]  # type: ignore[index]
    except KeyError:
        raise InvalidArgument(field, f"unknown value {value}") from None


def block_from_pb(pb: state_pb2.Block) -> Block:
    """A block spec from a request (server-owned fields ignored)."""
    return Block(
        id="",
        tenant="",
        label=pb.label,
        value=pb.value,
        limit=pb.limit or 20_000,
        description=pb.description,
        read_only=pb.read_only,
        hidden=pb.hidden,
        tags=list(pb.tags),
        metadata=struct_to_dict(pb.metadata),
    )


def block_to_pb(block: Block) -> state_pb2.Block:
    """A block for a response."""
    return state_pb2.Block(
        id=block.id,
        label=block.label,
        value=block.value,
        limit=block.limit,
        description=block.description,
        read_only=block.read_only,
        hidden=block.hidden,
        tags=block.tags,
        metadata=dict_to_struct(block.metadata),
        version=block.version,
        created_at=timestamp(block.created_at),
        updated_at=timestamp(block.updated_at),
    )


def tool_from_pb(pb: state_pb2.Tool) -> Tool:
    """A tool from a request; empty parameters mean an object without properties."""
    return Tool(pb.name, pb.description, pb.parameters_json or '{"type":"object","properties":{}}')


def tool_to_pb(tool: Tool) -> state_pb2.Tool:
    """A tool for a response."""
    return state_pb2.Tool(
        name=tool.name, description=tool.description, parameters_json=tool.parameters_json
    )


def rule_from_pb(field: str, pb: state_pb2.ToolRule) -> ToolRule:
    """A tool rule from a request."""
    if pb.type not in _RULE_TYPES:
        raise InvalidArgument(f"{field}.type", f"must be a known tool rule type, got {pb.type}")
    return ToolRule(
        type=_RULE_TYPES[pb.type],
        tool_name=pb.tool_name,
        children=tuple(pb.children),
        max_count=pb.max_count,
        default_child=pb.default_child,
        child_output_mapping=tuple(sorted(pb.child_output_mapping.items())),
        prompt_template=pb.prompt_template,
    )


def rule_to_pb(rule: ToolRule) -> state_pb2.ToolRule:
    """A tool rule for a response."""
    return state_pb2.ToolRule(
        type=_RULE_TYPES_PB[rule.type],
        tool_name=rule.tool_name,
        children=rule.children,
        max_count=rule.max_count,
        default_child=rule.default_child,
        child_output_mapping=dict(rule.child_output_mapping),
        prompt_template=rule.prompt_template,
    )


def agent_to_pb(agent: Agent) -> state_pb2.Agent:
    """An agent for a response."""
    return state_pb2.Agent(
        id=agent.id,
        name=agent.name,
        system=agent.system,
        model=agent.model,
        context_window=agent.context_window,
        blocks=[block_to_pb(b) for b in agent.blocks],
        tools=[tool_to_pb(t) for t in agent.tools],
        tool_rules=[rule_to_pb(r) for r in agent.tool_rules],
        tags=agent.tags,
        metadata=dict_to_struct(agent.metadata),
        memory_mode=_MEMORY_MODES_PB[agent.memory_mode],
        memory_update_mode=_UPDATE_MODES_PB[agent.memory_update_mode],
        message_ids=agent.message_ids,
        context_version=agent.context_version,
        memory_revision=agent.revision,
        created_at=timestamp(agent.created_at),
        updated_at=timestamp(agent.updated_at),
        version=agent.version,
    )


def mask_paths(mask_paths: list[str], allowed: frozenset[str]) -> list[str]:
    """Validates field-mask paths against the updatable fields."""
    if not mask_paths:
        raise InvalidArgument("update_mask", "must name at least one field to update")
    for path in mask_paths:
        if path not in allowed:
            raise InvalidArgument(
                "update_mask",
                f"unknown or read-only field {path!r}; updatable: {', '.join(sorted(allowed))}",
            )
    return mask_paths


def block_changes(pb: state_pb2.Block, paths: list[str]) -> dict[str, Any]:
    """The domain changes named by a block field mask."""
    changes: dict[str, Any] = {}
    for path in paths:
        if path == "tags":
            changes[path] = list(pb.tags)
        elif path == "metadata":
            changes[path] = struct_to_dict(pb.metadata)
        else:
            changes[path] = getattr(pb, path)
    return changes


def agent_changes(pb: state_pb2.Agent, paths: list[str]) -> dict[str, Any]:
    """The domain changes named by an agent field mask."""
    changes: dict[str, Any] = {}
    for path in paths:
        if path == "tags":
            changes[path] = list(pb.tags)
        elif path == "metadata":
            changes[path] = struct_to_dict(pb.metadata)
        elif path == "tools":
            changes[path] = [tool_from_pb(t) for t in pb.tools]
        elif path == "tool_rules":
            changes[path] = [
                rule_from_pb(f"agent.tool_rules[{i}]", r) for i, r in enumerate(pb.tool_rules)
            ]
        elif path == "memory_update_mode":
            changes[path] = update_mode("agent.memory_update_mode", pb.memory_update_mode)
        else:
            changes[path] = getattr(pb, path)
    return changes


def update_block_response(result: BlockUpdate) -> state_pb2.UpdateBlockResponse:
    """UpdateBlock's response."""
    return state_pb2.UpdateBlockResponse(
        block=block_to_pb(result.block),
        affected_agent_ids=result.affected_agent_ids,
        rebuilt_agent_ids=result.rebuilt_agent_ids,
    )


def compile_response(result: CompiledContext) -> state_pb2.CompileContextResponse:
    """CompileContext's response."""
    t = result.tokens
    return state_pb2.CompileContextResponse(
        system_prompt=result.system_prompt,
        compiled_memory=result.compiled_memory,
        memory_revision=result.memory_revision,
        prompt_hash=result.prompt_hash,
        tokens=state_pb2.TokenAccount(
            context_window=t.context_window,
            system=t.system,
            memory=t.memory,
            tools=t.tools,
            messages=t.messages,
            total=t.total,
        ),
        cache_hit=result.cache_hit,
        memory_update=result.memory_update,
        status=_STATUS_PB[result.status],
    )


def event_to_pb(event: AgentEvent) -> state_pb2.WatchAgentResponse:
    """A watch event for the stream."""
    return state_pb2.WatchAgentResponse(
        type=_EVENTS_PB[event.kind],
        agent_id=event.agent_id,
        block_id=event.block_id,
        memory_revision=event.memory_revision,
        context_version=event.context_version,
        prompt_hash=event.prompt_hash,
        time=timestamp(event.time),
        agent_version=event.agent_version,
    )


def started_event(agent: Agent, now: float) -> state_pb2.WatchAgentResponse:
    """The first message of every watch."""
    return state_pb2.WatchAgentResponse(
        type=state_pb2.EVENT_TYPE_WATCH_STARTED,
        agent_id=agent.id,
        memory_revision=agent.revision,
        context_version=agent.context_version,
        time=timestamp(now),
        agent_version=agent.version,
    )


def json_object(field: str, text: str) -> dict[str, Any]:
    """Parses a JSON object given as text."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        raise InvalidArgument(field, f"is not valid JSON: {error.msg}") from None
    if not isinstance(value, dict):
        raise InvalidArgument(field, "must be a JSON object")
    return value
