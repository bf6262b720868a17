"""State service messages to and from the plain types of `cairn.state_types`."""

from __future__ import annotations

import json

from cairn.protobuf_values import (
    CONTEXT_STATUS,
    EVENT_TYPE,
    MEMORY_MODE,
    MEMORY_TOOL_ERROR,
    MEMORY_UPDATE_MODE,
    MESSAGE_ROLE,
    TOOL_RULE_TYPE,
    from_struct,
    json_object,
    optional_timestamp,
    to_struct,
)
from cairn.state_types import (
    Agent,
    AgentEvent,
    Block,
    BlockSpec,
    CompiledContext,
    MemoryCommit,
    MemoryFile,
    MemoryToolResult,
    Message,
    TokenAccount,
    Tool,
    ToolCall,
    ToolRule,
)
from cairn.v1 import common_pb2, state_pb2

# --- from the wire --------------------------------------------------------------------------


def tool_call(pb: common_pb2.ToolCall) -> ToolCall:
    """A ToolCall."""
    return ToolCall(id=pb.id, name=pb.name, arguments_json=pb.arguments_json)


def message(pb: common_pb2.Message) -> Message:
    """A Message."""
    return Message(
        role=MESSAGE_ROLE.decode(pb.role),
        content=pb.content,
        tool_calls=tuple(tool_call(c) for c in pb.tool_calls),
        tool_call_id=pb.tool_call_id,
        name=pb.name,
        id=pb.id,
        agent_id=pb.agent_id,
        step_id=pb.step_id,
        created_at=optional_timestamp(pb, "created_at"),
    )


def block(pb: state_pb2.Block) -> Block:
    """A Block."""
    return Block(
        id=pb.id,
        label=pb.label,
        value=pb.value,
        limit=pb.limit,
        description=pb.description,
        read_only=pb.read_only,
        hidden=pb.hidden,
        tags=tuple(pb.tags),
        metadata=from_struct(pb.metadata),
        version=pb.version,
        created_at=optional_timestamp(pb, "created_at"),
        updated_at=optional_timestamp(pb, "updated_at"),
    )


def tool(pb: state_pb2.Tool) -> Tool:
    """A Tool with its schema parsed."""
    return Tool(
        name=pb.name, description=pb.description, parameters=json_object(pb.parameters_json)
    )


def tool_rule(pb: state_pb2.ToolRule) -> ToolRule:
    """A ToolRule."""
    return ToolRule(
        type=TOOL_RULE_TYPE.decode(pb.type),
        tool_name=pb.tool_name,
        children=tuple(pb.children),
        max_count=pb.max_count,
        default_child=pb.default_child,
        child_output_mapping=dict(pb.child_output_mapping),
        prompt_template=pb.prompt_template,
    )


def agent(pb: state_pb2.Agent) -> Agent:
    """An Agent."""
    return Agent(
        id=pb.id,
        name=pb.name,
        system=pb.system,
        model=pb.model,
        context_window=pb.context_window,
        blocks=tuple(block(b) for b in pb.blocks),
        tools=tuple(tool(t) for t in pb.tools),
        tool_rules=tuple(tool_rule(r) for r in pb.tool_rules),
        tags=tuple(pb.tags),
        metadata=from_struct(pb.metadata),
        memory_mode=MEMORY_MODE.decode(pb.memory_mode),
        memory_update_mode=MEMORY_UPDATE_MODE.decode(pb.memory_update_mode),
        message_ids=tuple(pb.message_ids),
        context_version=pb.context_version,
        memory_revision=pb.memory_revision,
        created_at=optional_timestamp(pb, "created_at"),
        updated_at=optional_timestamp(pb, "updated_at"),
        version=pb.version,
    )


def tokens(pb: state_pb2.TokenAccount) -> TokenAccount:
    """A TokenAccount."""
    return TokenAccount(
        context_window=pb.context_window,
        system=pb.system,
        memory=pb.memory,
        tools=pb.tools,
        messages=pb.messages,
        total=pb.total,
    )


def compiled_context(pb: state_pb2.CompileContextResponse) -> CompiledContext:
    """A CompiledContext with the tools array parsed."""
    tools_array = json.loads(pb.tools_json) if pb.tools_json else []
    return CompiledContext(
        system_prompt=pb.system_prompt,
        compiled_memory=pb.compiled_memory,
        memory_revision=pb.memory_revision,
        prompt_hash=pb.prompt_hash,
        tokens=tokens(pb.tokens),
        cache_hit=pb.cache_hit,
        memory_update=pb.memory_update,
        status=CONTEXT_STATUS.decode(pb.status),
        messages=tuple(message(m) for m in pb.messages),
        tools=tuple(tools_array),
        context_version=pb.context_version,
        available_skills=pb.available_skills,
    )


def agent_event(pb: state_pb2.WatchAgentResponse) -> AgentEvent:
    """An AgentEvent."""
    return AgentEvent(
        type=EVENT_TYPE.decode(pb.type),
        agent_id=pb.agent_id,
        block_id=pb.block_id,
        memory_revision=pb.memory_revision,
        context_version=pb.context_version,
        prompt_hash=pb.prompt_hash,
        time=optional_timestamp(pb, "time"),
        agent_version=pb.agent_version,
        step_id=pb.step_id,
    )


def memory_tool_result(pb: state_pb2.ExecuteMemoryToolResponse) -> MemoryToolResult:
    """A MemoryToolResult (`error` None when the call was not refused)."""
    return MemoryToolResult(
        result=pb.result,
        ok=pb.ok,
        error=(
            None
            if pb.error == state_pb2.MEMORY_TOOL_ERROR_UNSPECIFIED
            else MEMORY_TOOL_ERROR.decode(pb.error)
        ),
        block=block(pb.block) if pb.HasField("block") else None,
        rebuilt_agent_ids=tuple(pb.rebuilt_agent_ids),
        memory_revision=pb.memory_revision,
    )


def memory_file(pb: state_pb2.MemoryFile, revision: str) -> MemoryFile:
    """A MemoryFile as of `revision`."""
    return MemoryFile(
        path=pb.path,
        content=pb.content,
        description=pb.description,
        read_only=pb.read_only,
        limit=pb.limit,
        body=pb.body,
        revision=revision,
    )


def memory_commit(pb: state_pb2.MemoryCommit) -> MemoryCommit:
    """A MemoryCommit."""
    return MemoryCommit(
        revision=pb.revision,
        message=pb.message,
        author=pb.author,
        time=optional_timestamp(pb, "time"),
        parents=tuple(pb.parents),
        changed_paths=tuple(pb.changed_paths),
    )


# --- to the wire ----------------------------------------------------------------------------


def message_pb(value: Message) -> common_pb2.Message:
    """The input fields of a Message (the server assigns the others)."""
    return common_pb2.Message(
        role=MESSAGE_ROLE.encode(value.role),
        content=value.content,
        tool_calls=[
            common_pb2.ToolCall(id=c.id, name=c.name, arguments_json=c.arguments_json)
            for c in value.tool_calls
        ],
        tool_call_id=value.tool_call_id,
        name=value.name,
    )


def block_spec_pb(spec: BlockSpec) -> state_pb2.Block:
    """A new block's fields."""
    return state_pb2.Block(
        label=spec.label,
        value=spec.value,
        limit=spec.limit,
        description=spec.description,
        read_only=spec.read_only,
        hidden=spec.hidden,
        tags=list(spec.tags),
        metadata=to_struct(spec.metadata),
    )


def tool_pb(value: Tool) -> state_pb2.Tool:
    """A Tool with its schema as JSON text."""
    return state_pb2.Tool(
        name=value.name,
        description=value.description,
        parameters_json=json.dumps(value.parameters) if value.parameters else "",
    )


def tool_rule_pb(rule: ToolRule) -> state_pb2.ToolRule:
    """A ToolRule."""
    return state_pb2.ToolRule(
        type=TOOL_RULE_TYPE.encode(rule.type),
        tool_name=rule.tool_name,
        children=list(rule.children),
        max_count=rule.max_count,
        default_child=rule.default_child,
        child_output_mapping=dict(rule.child_output_mapping),
        prompt_template=rule.prompt_template,
    )
