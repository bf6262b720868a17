"""Protobuf <-> domain conversions for the state service. Only servicers use this module."""

from __future__ import annotations

from typing import Any

from google.protobuf import json_format, struct_pb2, timestamp_pb2

from cairn.v1 import common_pb2, state_pb2
from cairn_server.errors import InvalidArgument
from state_service.blocks import BlockUpdate
from state_service.context import CompiledContext, ContextStatus, TokenAccount
from state_service.memfs.files import MemoryFileData
from state_service.memfs.repo import CommitInfo
from state_service.memory_tools import ToolError
from state_service.models import (
    Agent,
    AgentEvent,
    Block,
    EventKind,
    MemoryMode,
    MemoryUpdateMode,
    Message,
    Role,
    Tool,
    ToolCall,
    ToolRule,
    ToolRuleType,
)
from state_service.tool_calls import ToolResult

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
    EventKind.MESSAGES_CHECKPOINTED: state_pb2.EVENT_TYPE_MESSAGES_CHECKPOINTED,
    EventKind.COMPACTION_APPLIED: state_pb2.EVENT_TYPE_COMPACTION_APPLIED,
}
_ROLES = {
    common_pb2.MESSAGE_ROLE_SYSTEM: Role.SYSTEM,
    common_pb2.MESSAGE_ROLE_USER: Role.USER,
    common_pb2.MESSAGE_ROLE_ASSISTANT: Role.ASSISTANT,
    common_pb2.MESSAGE_ROLE_TOOL: Role.TOOL,
    common_pb2.MESSAGE_ROLE_SUMMARY: Role.SUMMARY,
}
_ROLES_PB = {v: k for k, v in _ROLES.items()}
_TOOL_ERRORS_PB = {
    ToolError.INVALID_ARGUMENTS: state_pb2.MEMORY_TOOL_ERROR_INVALID_ARGUMENTS,
    ToolError.UNKNOWN_TOOL: state_pb2.MEMORY_TOOL_ERROR_UNKNOWN_TOOL,
    ToolError.UNKNOWN_LABEL: state_pb2.MEMORY_TOOL_ERROR_UNKNOWN_LABEL,
    ToolError.READ_ONLY: state_pb2.MEMORY_TOOL_ERROR_READ_ONLY,
    ToolError.TEXT_NOT_FOUND: state_pb2.MEMORY_TOOL_ERROR_TEXT_NOT_FOUND,
    ToolError.AMBIGUOUS: state_pb2.MEMORY_TOOL_ERROR_AMBIGUOUS,
    ToolError.LINE_NUMBER_PREFIX: state_pb2.MEMORY_TOOL_ERROR_LINE_NUMBER_PREFIX,
    ToolError.INSERT_LINE_OUT_OF_RANGE: state_pb2.MEMORY_TOOL_ERROR_INSERT_LINE_OUT_OF_RANGE,
    ToolError.LIMIT_EXCEEDED: state_pb2.MEMORY_TOOL_ERROR_LIMIT_EXCEEDED,
    ToolError.RECALL_NOT_CONFIGURED: state_pb2.MEMORY_TOOL_ERROR_RECALL_NOT_CONFIGURED,
    ToolError.RECALL_FAILED: state_pb2.MEMORY_TOOL_ERROR_RECALL_FAILED,
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


def tokens_to_pb(t: TokenAccount) -> state_pb2.TokenAccount:
    """A token account for a response."""
    return state_pb2.TokenAccount(
        context_window=t.context_window,
        system=t.system,
        memory=t.memory,
        tools=t.tools,
        messages=t.messages,
        total=t.total,
    )


def compile_response(
    result: CompiledContext, with_memory: bool = True
) -> state_pb2.CompileContextResponse:
    """CompileContext's response (without `compiled_memory` for the PROMPT view)."""
    return state_pb2.CompileContextResponse(
        system_prompt=result.system_prompt,
        compiled_memory=result.compiled_memory if with_memory else "",
        memory_revision=result.memory_revision,
        prompt_hash=result.prompt_hash,
        tokens=tokens_to_pb(result.tokens),
        cache_hit=result.cache_hit,
        memory_update=result.memory_update,
        status=_STATUS_PB[result.status],
        messages=[message_to_pb(m) for m in result.messages],
        tools_json=result.tools_json,
        context_version=result.context_version,
        available_skills=result.available_skills,
    )


def message_to_pb(message: Message) -> common_pb2.Message:
    """A message for a response."""
    return common_pb2.Message(
        id=message.id,
        agent_id=message.agent_id,
        role=_ROLES_PB[message.role],
        content=message.content,
        tool_calls=[
            common_pb2.ToolCall(id=c.id, name=c.name, arguments_json=c.arguments_json)
            for c in message.tool_calls
        ],
        tool_call_id=message.tool_call_id,
        step_id=message.step_id,
        created_at=timestamp(message.created_at),
        name=message.name,
    )


def message_from_pb(field: str, pb: common_pb2.Message) -> Message:
    """A message from a request (server-owned fields ignored)."""
    if pb.role not in _ROLES:
        raise InvalidArgument(f"{field}.role", "must be set to a known role")
    return Message(
        id="",
        agent_id="",
        role=_ROLES[pb.role],
        content=pb.content,
        tool_calls=tuple(ToolCall(c.id, c.name, c.arguments_json) for c in pb.tool_calls),
        tool_call_id=pb.tool_call_id,
        name=pb.name,
    )


def role_from_pb(field: str, value: int) -> Role:
    """A role from its protobuf value."""
    if value not in _ROLES:
        raise InvalidArgument(field, f"unknown role {value}")
    return _ROLES[value]  # type: ignore[index]


def time_bounds(pb: common_pb2.TimeRange) -> tuple[float | None, float | None]:
    """A TimeRange as optional epoch seconds."""
    start = pb.start.ToNanoseconds() / 1e9 if pb.HasField("start") else None
    end = pb.end.ToNanoseconds() / 1e9 if pb.HasField("end") else None
    return start, end


def tool_result_to_pb(result: ToolResult) -> state_pb2.ExecuteMemoryToolResponse:
    """ExecuteMemoryTool's response."""
    response = state_pb2.ExecuteMemoryToolResponse(
        result=result.text,
        ok=result.ok,
        error=(
            _TOOL_ERRORS_PB[result.error]
            if result.error
            else state_pb2.MEMORY_TOOL_ERROR_UNSPECIFIED
        ),
        rebuilt_agent_ids=result.rebuilt_agent_ids,
        memory_revision=result.memory_revision,
    )
    if result.block is not None:
        response.block.CopyFrom(block_to_pb(result.block))
    return response


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
        step_id=event.step_id,
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


def memory_file_to_pb(file: MemoryFileData) -> state_pb2.MemoryFile:
    """A memory file for a response."""
    return state_pb2.MemoryFile(
        path=file.path,
        content=file.content,
        description=file.description or "",
        read_only=file.is_read_only,
        limit=file.limit or 0,
        body=file.body,
    )


def memory_commit_to_pb(commit: CommitInfo) -> state_pb2.MemoryCommit:
    """A memory commit for a response."""
    return state_pb2.MemoryCommit(
        revision=commit.revision,
        message=commit.message,
        author=commit.author,
        time=timestamp(commit.time),
        parents=commit.parents,
        changed_paths=commit.changed_paths,
    )
