"""Domain types of the state service: plain dataclasses, no protobuf, no SQL."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

DEFAULT_BLOCK_LIMIT = 20_000
DEFAULT_CONTEXT_WINDOW = 128_000


class MemoryMode(StrEnum):
    """How memory renders into the prompt."""

    STANDARD = "standard"
    LINE_NUMBERED = "line_numbered"
    MEMFS = "memfs"


class MemoryUpdateMode(StrEnum):
    """What a memory change does to the stored system prompt."""

    SYSTEM_PROMPT = "system_prompt"
    MESSAGE = "message"


class ToolRuleType(StrEnum):
    """Letta's tool rules."""

    RUN_FIRST = "run_first"
    EXIT_LOOP = "exit_loop"
    CONTINUE_LOOP = "continue_loop"
    CONSTRAIN_CHILD_TOOLS = "constrain_child_tools"
    MAX_COUNT_PER_STEP = "max_count_per_step"
    PARENT_LAST_TOOL = "parent_last_tool"
    REQUIRED_BEFORE_EXIT = "required_before_exit"
    CONDITIONAL = "conditional"


@dataclass(slots=True)
class Block:
    """A unit of core memory, attachable to many agents."""

    id: str
    tenant: str
    label: str
    value: str = ""
    limit: int = DEFAULT_BLOCK_LIMIT
    description: str = ""
    read_only: bool = False
    hidden: bool = False
    tags: list[str] = field(default_factory=list)
    metadata: dict[str, Any] = field(default_factory=dict)
    version: int = 1
    created_at: float = 0.0
    updated_at: float = 0.0


# Block fields whose change alters compiled memory (DESIGN.md §3.3).
PROMPT_FIELDS = frozenset({"label", "value", "limit", "description", "read_only", "hidden"})
BLOCK_UPDATABLE = frozenset(PROMPT_FIELDS | {"tags", "metadata"})


@dataclass(slots=True, frozen=True)
class Tool:
    """A function the model may call; `parameters_json` is its arguments' JSON Schema."""

    name: str
    description: str = ""
    parameters_json: str = '{"type":"object","properties":{}}'


@dataclass(slots=True, frozen=True)
class ToolRule:
    """A constraint on tool use, rendered into `<tool_usage_rules>`."""

    type: ToolRuleType
    tool_name: str
    children: tuple[str, ...] = ()
    max_count: int = 0
    default_child: str = ""
    child_output_mapping: tuple[tuple[str, str], ...] = ()
    prompt_template: str = ""


class Role(StrEnum):
    """Who produced a message."""

    SYSTEM = "system"
    USER = "user"
    ASSISTANT = "assistant"
    TOOL = "tool"
    SUMMARY = "summary"


@dataclass(slots=True, frozen=True)
class ToolCall:
    """One function call of an assistant message."""

    id: str
    name: str
    arguments_json: str


@dataclass(slots=True, frozen=True)
class Message:
    """One message of an agent's history. Committed messages never change."""

    id: str
    agent_id: str
    role: Role
    content: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str = ""
    name: str = ""
    step_id: str = ""
    created_at: float = 0.0
    tokens: int = 0


@dataclass(slots=True)
class Agent:
    """An agent's durable state; `blocks` are in render order."""

    id: str
    tenant: str
    name: str
    system: str = ""
    model: str = ""
    context_window: int = DEFAULT_CONTEXT_WINDOW
    blocks: list[Block] = field(default_factory=list)
    tools: list[Tool] = field(default_factory=list)
    tool_rules: list[ToolRule] = field(default_factory=list)
    tags: list[str] = field(default_factory=list)
    metadata: dict[str, Any] = field(default_factory=dict)
    memory_mode: MemoryMode = MemoryMode.STANDARD
    memory_update_mode: MemoryUpdateMode = MemoryUpdateMode.SYSTEM_PROMPT
    message_ids: list[str] = field(default_factory=list)
    context_version: int = 0
    memory_revision: int = 1
    memory_updated_at: float = 0.0
    created_at: float = 0.0
    updated_at: float = 0.0
    version: int = 1
    # History bookkeeping: the system message (window[0]), how many messages history holds
    # besides it, archival records written, and the memory revision last acknowledged by a
    # step in MESSAGE mode.
    system_message_id: str = ""
    message_count: int = 0
    archival_count: int = 0
    delivered_revision: int = 0
    # MEMFS agents: the commit the memory compiles from (the API's memory revision).
    memory_head: str = ""
    # Messages in the window, the system message included (message_ids may not be loaded).
    window_size: int = 0

    @property
    def recall_count(self) -> int:
        """Messages in history but out of the window (Letta's 'previous messages')."""
        return max(0, self.message_count - max(0, self.window_size - 1))

    @property
    def revision(self) -> str:
        """The memory revision as the API shows it: the commit id for MEMFS agents, else the
        counter."""
        if self.memory_mode is MemoryMode.MEMFS:
            return self.memory_head
        return str(self.memory_revision)


AGENT_UPDATABLE = frozenset(
    {
        "name",
        "system",
        "model",
        "context_window",
        "tools",
        "tool_rules",
        "tags",
        "metadata",
        "memory_update_mode",
    }
)


@dataclass(slots=True, frozen=True)
class StoredPrompt:
    """A compiled system prompt and what it was built from (the cache entry)."""

    agent_id: str
    system_prompt: str
    compiled_memory: str
    raw_hash: str
    memory_revision: int
    prompt_hash: str
    system_tokens: int
    memory_tokens: int
    counter: str
    built_at: float


@dataclass(slots=True, frozen=True)
class PromptState:
    """What CompileContext reads on its hot path: the agent's current keys and its cache."""

    agent_id: str
    system_hash: str
    memory_revision: int
    memory_update_mode: MemoryUpdateMode
    context_window: int
    tools_tokens: int
    tools_counter: str
    prompt: StoredPrompt | None
    context_version: int = 0
    delivered_revision: int = 0
    tools_json: str = "[]"
    memory_head: str = ""

    @property
    def revision(self) -> str:
        """The memory revision as the API shows it."""
        return self.memory_head or str(self.memory_revision)


@dataclass(slots=True, frozen=True)
class ToolsPayload:
    """The tool schemas as sent to the model (OpenAI `tools` JSON) and their token count."""

    json: str
    tokens: int
    counter: str


@dataclass(slots=True, frozen=True)
class StepRecord:
    """A committed step, kept so that a retry returns the first result."""

    agent_id: str
    step_id: str
    request_hash: str
    message_ids: tuple[str, ...]
    context_version: int
    created_at: float


@dataclass(slots=True, frozen=True)
class Forward:
    """A committed message waiting to reach the agent's MESSAGES stream in recall."""

    id: int
    tenant: str
    agent_id: str
    message: Message
    attempts: int


@dataclass(slots=True, frozen=True)
class CompactionPlan:
    """Messages chosen for eviction, valid while the window stays at its version."""

    plan_id: str
    tenant: str
    agent_id: str
    base_context_version: int
    message_ids: tuple[str, ...]
    created_at: float
    applied_at: float | None = None


class EventKind(StrEnum):
    """What happened to an agent (WatchAgent)."""

    BLOCK_UPDATED = "block_updated"
    PROMPT_REBUILT = "prompt_rebuilt"
    BLOCKS_CHANGED = "blocks_changed"
    AGENT_UPDATED = "agent_updated"
    AGENT_DELETED = "agent_deleted"
    MESSAGES_CHECKPOINTED = "messages_checkpointed"
    COMPACTION_APPLIED = "compaction_applied"


@dataclass(slots=True, frozen=True)
class AgentEvent:
    """One event for one agent, published after its transaction commits."""

    kind: EventKind
    tenant: str
    agent_id: str
    memory_revision: str
    context_version: int
    agent_version: int
    time: float
    block_id: str = ""
    prompt_hash: str = ""
    step_id: str = ""
