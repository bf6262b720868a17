"""The contract's enumerations as Python string enums.

Each member's value is the lower-case name the contract gives it (`MessageRole.USER == "user"`),
so members compare equal to plain strings and print readably. `UNSPECIFIED` stands for an
unset value, and for a value a newer server sends that this client does not know yet.
"""

from __future__ import annotations

from enum import StrEnum

__all__ = [
    "ContextStatus",
    "ContextView",
    "EventType",
    "MemoryMode",
    "MemoryToolError",
    "MemoryUpdateMode",
    "MessageRole",
    "ParticipantRole",
    "RecordKind",
    "StreamKind",
    "ToolRuleType",
]


class MessageRole(StrEnum):
    """Who produced a message."""

    UNSPECIFIED = "unspecified"
    SYSTEM = "system"
    USER = "user"
    ASSISTANT = "assistant"
    TOOL = "tool"
    # A summary that replaced evicted messages during compaction.
    SUMMARY = "summary"


class MemoryMode(StrEnum):
    """How an agent's memory is rendered into its prompt."""

    UNSPECIFIED = "unspecified"
    STANDARD = "standard"
    LINE_NUMBERED = "line_numbered"
    MEMFS = "memfs"


class MemoryUpdateMode(StrEnum):
    """What a memory change does to the stored system prompt."""

    UNSPECIFIED = "unspecified"
    SYSTEM_PROMPT = "system_prompt"
    MESSAGE = "message"


class ToolRuleType(StrEnum):
    """Letta's tool rules."""

    UNSPECIFIED = "unspecified"
    RUN_FIRST = "run_first"
    EXIT_LOOP = "exit_loop"
    CONTINUE_LOOP = "continue_loop"
    CONSTRAIN_CHILD_TOOLS = "constrain_child_tools"
    MAX_COUNT_PER_STEP = "max_count_per_step"
    PARENT_LAST_TOOL = "parent_last_tool"
    REQUIRED_BEFORE_EXIT = "required_before_exit"
    CONDITIONAL = "conditional"


class ContextStatus(StrEnum):
    """Whether a compiled context fits the model's window."""

    UNSPECIFIED = "unspecified"
    OK = "ok"
    NEEDS_COMPACTION = "needs_compaction"
    CONTEXT_WINDOW_OVERFLOW_IN_SYSTEM_PROMPT = "context_window_overflow_in_system_prompt"


class ContextView(StrEnum):
    """How much of a compiled context a reply carries (`PROMPT` leaves out the compiled
    memory, which the system prompt already contains)."""

    UNSPECIFIED = "unspecified"
    FULL = "full"
    PROMPT = "prompt"


class EventType(StrEnum):
    """What happened to a watched agent."""

    UNSPECIFIED = "unspecified"
    WATCH_STARTED = "watch_started"
    BLOCK_UPDATED = "block_updated"
    PROMPT_REBUILT = "prompt_rebuilt"
    BLOCKS_CHANGED = "blocks_changed"
    AGENT_UPDATED = "agent_updated"
    MESSAGES_CHECKPOINTED = "messages_checkpointed"
    COMPACTION_APPLIED = "compaction_applied"


class MemoryToolError(StrEnum):
    """Why a memory tool call was refused."""

    UNSPECIFIED = "unspecified"
    INVALID_ARGUMENTS = "invalid_arguments"
    UNKNOWN_TOOL = "unknown_tool"
    UNKNOWN_LABEL = "unknown_label"
    READ_ONLY = "read_only"
    TEXT_NOT_FOUND = "text_not_found"
    AMBIGUOUS = "ambiguous"
    LINE_NUMBER_PREFIX = "line_number_prefix"
    INSERT_LINE_OUT_OF_RANGE = "insert_line_out_of_range"
    LIMIT_EXCEEDED = "limit_exceeded"
    RECALL_NOT_CONFIGURED = "recall_not_configured"
    RECALL_FAILED = "recall_failed"


class StreamKind(StrEnum):
    """What a recall stream holds."""

    UNSPECIFIED = "unspecified"
    CONVERSATION = "conversation"
    ARCHIVAL = "archival"
    MESSAGES = "messages"


class ParticipantRole(StrEnum):
    """What a participant may do in a stream."""

    UNSPECIFIED = "unspecified"
    READER = "reader"
    WRITER = "writer"
    OWNER = "owner"


class RecordKind(StrEnum):
    """What a record of a stream is."""

    UNSPECIFIED = "unspecified"
    MESSAGE = "message"
    ATTACH = "attach"
    DETACH = "detach"
    REDACTION = "redaction"
