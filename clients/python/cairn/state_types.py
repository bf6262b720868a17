"""What the state service returns and takes, as plain frozen dataclasses.

Sequences are tuples, metadata is a dict, JSON text the model reads or writes stays text
(`ToolCall.arguments_json`), and JSON the client works with is parsed (`Tool.parameters`,
`CompiledContext.tools`). Times are timezone-aware UTC datetimes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from cairn.enums import (
    ContextStatus,
    EventType,
    MemoryMode,
    MemoryToolError,
    MemoryUpdateMode,
    MessageRole,
    ToolRuleType,
)

__all__ = [
    "Agent",
    "AgentEvent",
    "AgentUpdate",
    "AppliedCompaction",
    "Block",
    "BlockSpec",
    "BlockUpdate",
    "CommittedFiles",
    "CommittedStep",
    "CompactionPlan",
    "CompiledContext",
    "ImportedAgents",
    "MemoryCommit",
    "MemoryFile",
    "MemoryToolResult",
    "Message",
    "RevertedMemory",
    "TokenAccount",
    "Tool",
    "ToolCall",
    "ToolRule",
]


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One function call an assistant message asked for."""

    id: str
    name: str
    # The arguments exactly as the model produced them (a JSON object as text).
    arguments_json: str = "{}"

    def arguments(self) -> dict[str, Any]:
        """The arguments parsed (raises ValueError when the model wrote bad JSON)."""
        value = json.loads(self.arguments_json or "{}")
        if not isinstance(value, dict):
            raise ValueError(f"tool call {self.id}: arguments are not a JSON object")
        return value


@dataclass(frozen=True, slots=True)
class Message:
    """A message of an agent's history. On input only `role`, `content`, `tool_calls`,
    `tool_call_id` and `name` count; the server assigns the rest."""

    role: MessageRole
    content: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str = ""
    name: str = ""
    id: str = ""
    agent_id: str = ""
    step_id: str = ""
    created_at: datetime | None = None

    @classmethod
    def system(cls, content: str) -> Message:
        """A system message (e.g. a memory update the harness showed the model)."""
        return cls(MessageRole.SYSTEM, content)

    @classmethod
    def user(cls, content: str, *, name: str = "") -> Message:
        """A user message."""
        return cls(MessageRole.USER, content, name=name)

    @classmethod
    def assistant(cls, content: str = "", tool_calls: tuple[ToolCall, ...] = ()) -> Message:
        """An assistant message, possibly calling tools."""
        return cls(MessageRole.ASSISTANT, content, tool_calls=tool_calls)

    @classmethod
    def tool(cls, content: str, *, tool_call_id: str, name: str = "") -> Message:
        """A tool's result, answering the call `tool_call_id`."""
        return cls(MessageRole.TOOL, content, tool_call_id=tool_call_id, name=name)


@dataclass(frozen=True, slots=True)
class Block:
    """A unit of core memory; one block may be attached to many agents."""

    id: str
    label: str
    value: str
    limit: int
    description: str
    read_only: bool
    hidden: bool
    tags: tuple[str, ...]
    metadata: dict[str, Any]
    version: int
    created_at: datetime | None
    updated_at: datetime | None


@dataclass(frozen=True, slots=True)
class BlockSpec:
    """A new block to create with an agent (`limit` 0 means the server default, 20000)."""

    label: str
    value: str = ""
    limit: int = 0
    description: str = ""
    read_only: bool = False
    hidden: bool = False
    tags: tuple[str, ...] = ()
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Tool:
    """A function the model may call; `parameters` is its JSON Schema."""

    name: str
    description: str = ""
    parameters: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ToolRule:
    """A constraint on tool use (Letta's tool rules)."""

    type: ToolRuleType
    tool_name: str
    children: tuple[str, ...] = ()
    max_count: int = 0
    default_child: str = ""
    child_output_mapping: dict[str, str] = field(default_factory=dict)
    prompt_template: str = ""


@dataclass(frozen=True, slots=True)
class Agent:
    """An agent's whole durable state; `blocks` are in render order and `message_ids` is the
    in-context window (index 0 is the system message)."""

    id: str
    name: str
    system: str
    model: str
    context_window: int
    blocks: tuple[Block, ...]
    tools: tuple[Tool, ...]
    tool_rules: tuple[ToolRule, ...]
    tags: tuple[str, ...]
    metadata: dict[str, Any]
    memory_mode: MemoryMode
    memory_update_mode: MemoryUpdateMode
    message_ids: tuple[str, ...]
    context_version: int
    memory_revision: str
    created_at: datetime | None
    updated_at: datetime | None
    version: int


@dataclass(frozen=True, slots=True)
class AgentUpdate:
    """The agent after an update; `prompt_rebuilt` when the update recompiled its prompt."""

    agent: Agent
    prompt_rebuilt: bool


@dataclass(frozen=True, slots=True)
class BlockUpdate:
    """The block after an update, the agents whose memory revision moved, and those whose
    stored prompt was rebuilt."""

    block: Block
    affected_agent_ids: tuple[str, ...]
    rebuilt_agent_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class TokenAccount:
    """How the context's tokens split: `total` is system + tools + messages (+ a memory
    update, when one is returned)."""

    context_window: int
    system: int
    memory: int
    tools: int
    messages: int
    total: int


@dataclass(frozen=True, slots=True)
class CompiledContext:
    """Everything a harness needs for one model call. Pass `context_version` to
    `commit_step`; `tools` is the OpenAI-style `tools` array."""

    system_prompt: str
    compiled_memory: str
    memory_revision: str
    prompt_hash: str
    tokens: TokenAccount
    cache_hit: bool
    memory_update: str
    status: ContextStatus
    messages: tuple[Message, ...]
    tools: tuple[dict[str, Any], ...]
    context_version: int
    available_skills: str


@dataclass(frozen=True, slots=True)
class AgentEvent:
    """Something that happened to a watched agent."""

    type: EventType
    agent_id: str
    block_id: str
    memory_revision: str
    context_version: int
    prompt_hash: str
    time: datetime | None
    agent_version: int
    step_id: str


@dataclass(frozen=True, slots=True)
class CommittedStep:
    """A step's committed messages (with ids) and the window version after it;
    `replayed` when the step id was committed before and nothing was written."""

    step_id: str
    messages: tuple[Message, ...]
    context_version: int
    replayed: bool


@dataclass(frozen=True, slots=True)
class MemoryToolResult:
    """A memory tool's answer: `result` is the text for the model. When `ok` is False the
    call was refused, `error` says why, and nothing changed."""

    result: str
    ok: bool
    error: MemoryToolError | None
    block: Block | None
    rebuilt_agent_ids: tuple[str, ...]
    memory_revision: str


@dataclass(frozen=True, slots=True)
class CompactionPlan:
    """The oldest messages to summarise; apply the plan with `apply_compaction`."""

    plan_id: str
    messages: tuple[Message, ...]
    base_context_version: int
    tokens_before: int
    tokens_after: int


@dataclass(frozen=True, slots=True)
class AppliedCompaction:
    """The summary message now at the start of the window, and the new token account."""

    summary_message: Message
    context_version: int
    tokens: TokenAccount


@dataclass(frozen=True, slots=True)
class ImportedAgents:
    """Imported agents in file order, and old id -> new id for agents, blocks, messages."""

    agents: tuple[Agent, ...]
    id_map: dict[str, str]


@dataclass(frozen=True, slots=True)
class MemoryFile:
    """One Markdown file of a MEMFS agent's memory, as of commit `revision`."""

    path: str
    content: str
    description: str
    read_only: bool
    limit: int
    body: str
    revision: str


@dataclass(frozen=True, slots=True)
class MemoryCommit:
    """One commit of a MEMFS agent's memory."""

    revision: str
    message: str
    author: str
    time: datetime | None
    parents: tuple[str, ...]
    changed_paths: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class CommittedFiles:
    """The new memory revision (a commit id) and what it changed."""

    revision: str
    changed_paths: tuple[str, ...]
    prompt_rebuilt: bool


@dataclass(frozen=True, slots=True)
class RevertedMemory:
    """The new memory revision made by a revert, and the paths it changed."""

    revision: str
    changed_paths: tuple[str, ...]
