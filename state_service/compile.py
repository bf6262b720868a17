"""Prompt compilation: pure functions from an agent's blocks and settings to text.

The block renderers follow Letta's (`Memory.compile`) byte for byte, so prompts written for
Letta work unchanged (DESIGN.md §3.2). Nothing here reads a clock or a store: the same
inputs always give the same bytes (DESIGN.md §6.7).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Sequence

from state_service.models import Block, MemoryMode, ToolRule, ToolRuleType

CORE_MEMORY_PLACEHOLDER = "{CORE_MEMORY}"

MEMORY_BLOCKS_HEADER = (
    "<memory_blocks>\nThe following memory blocks are currently engaged in your core memory unit:"
    "\n\n"
)
LINE_NUMBER_WARNING = (
    "<warning>\n# NOTE: Line numbers shown below (with arrows like '1→') are to help during "
    "editing. Do NOT include line number prefixes in your memory edit tool calls.\n</warning>\n"
)
TOOL_RULES_DESCRIPTION = (
    "The following constraints define rules for tool usage and guide desired behavior. These "
    "rules must be followed to ensure proper tool execution and workflow. A single response "
    "may contain multiple tool calls."
)


def _render_block(block: Block, line_numbered: bool) -> str:
    parts = [
        f"<{block.label}>\n<description>\n{block.description}\n</description>\n<metadata>",
    ]
    if block.read_only:
        parts.append("\n- read_only=true")
    parts.append(
        f"\n- chars_current={len(block.value)}\n- chars_limit={block.limit}\n</metadata>\n"
    )
    if line_numbered:
        parts.append(LINE_NUMBER_WARNING)
        parts.append("<value>\n")
        if block.value:
            parts.extend(f"{i}→ {line}\n" for i, line in enumerate(block.value.split("\n"), 1))
    else:
        parts.append(f"<value>\n{block.value}\n")
    parts.append(f"</value>\n</{block.label}>\n")
    return "".join(parts)


def render_block(block: Block, mode: MemoryMode) -> str:
    """One block as it appears inside `<memory_blocks>`."""
    return _render_block(block, mode is MemoryMode.LINE_NUMBERED)


def memory_parts(blocks: Sequence[Block], mode: MemoryMode, rules: Sequence[ToolRule]) -> list[str]:
    """The compiled memory as pieces whose concatenation is `compile_memory(...)`.

    Each visible block is one piece, so a token count can be cached per rendered block.
    """
    parts: list[str] = []
    visible = [block for block in blocks if not block.hidden]
    if visible:
        parts.append(MEMORY_BLOCKS_HEADER)
        for i, block in enumerate(visible):
            if i:
                parts.append("\n")
            parts.append(render_block(block, mode))
        parts.append("\n</memory_blocks>")
    tool_rules = render_tool_rules(rules)
    if tool_rules:
        parts.append(f"\n\n{tool_rules}")
    return parts


def render_blocks(blocks: Sequence[Block], mode: MemoryMode) -> str:
    """The `<memory_blocks>` section; empty when no visible block is attached."""
    return "".join(memory_parts(blocks, mode, ()))


def _rule_sentence(rule: ToolRule) -> str | None:
    name = rule.tool_name
    children = ", ".join(rule.children)
    match rule.type:
        case ToolRuleType.CONSTRAIN_CHILD_TOOLS:
            return (
                f"<tool_rule>\nAfter using {name}, you must use one of these tools: {children}"
                "\n</tool_rule>"
            )
        case ToolRuleType.PARENT_LAST_TOOL:
            return f"<tool_rule>\n{children} can only be used after {name}\n</tool_rule>"
        case ToolRuleType.CONDITIONAL:
            return (
                f"<tool_rule>\n{name} will determine which tool to use next based on its output"
                "\n</tool_rule>"
            )
        case ToolRuleType.EXIT_LOOP:
            return (
                f"<tool_rule>\n{name} ends your response (yields control) when called\n</tool_rule>"
            )
        case ToolRuleType.CONTINUE_LOOP:
            return (
                f"<tool_rule>\n{name} requires continuing your response when called\n</tool_rule>"
            )
        case ToolRuleType.REQUIRED_BEFORE_EXIT:
            return f"<tool_rule>{name} must be called before ending the conversation</tool_rule>"
        case ToolRuleType.MAX_COUNT_PER_STEP:
            return (
                f"<tool_rule>\n{name}: at most {rule.max_count} use(s) per response\n</tool_rule>"
            )
        case ToolRuleType.RUN_FIRST:
            return None


def render_tool_rules(rules: Sequence[ToolRule]) -> str:
    """The `<tool_usage_rules>` section, or empty when no rule has a sentence.

    A rule's `prompt_template` replaces its default sentence, with `{tool_name}`,
    `{children}` and `{max_count}` substituted.
    """
    sentences: list[str] = []
    for rule in rules:
        if rule.prompt_template:
            sentence: str | None = (
                rule.prompt_template.replace("{tool_name}", rule.tool_name)
                .replace("{children}", ", ".join(rule.children))
                .replace("{max_count}", str(rule.max_count))
            )
        else:
            sentence = _rule_sentence(rule)
        if sentence:
            sentences.append(sentence)
    if not sentences:
        return ""
    joined = "\n".join(sentences)
    return f"<tool_usage_rules>\n{TOOL_RULES_DESCRIPTION}\n\n{joined}\n</tool_usage_rules>"


def compile_memory(blocks: Sequence[Block], mode: MemoryMode, rules: Sequence[ToolRule]) -> str:
    """The compiled memory: rendered blocks, then tool rules after a blank line (as Letta)."""
    return "".join(memory_parts(blocks, mode, rules))


def format_timestamp(epoch: float) -> str:
    """Letta's timestamp format, always in UTC: `2026-11-30 06:05:16 PM UTC+0000`."""
    return time.strftime("%Y-%m-%d %I:%M:%S %p UTC+0000", time.gmtime(epoch))


def render_memory_metadata(
    agent_id: str, memory_modified_at: float | None, recall_messages: int, archival_records: int
) -> str:
    """The `<memory_metadata>` section.

    It names the time memory was last modified (not the time of compilation, so that the
    same state always compiles to the same bytes), or no time when `memory_modified_at` is
    None (MEMFS agents, whose history is their git log).
    """
    modified = (
        ""
        if memory_modified_at is None
        else f"- Memory blocks were last modified: {format_timestamp(memory_modified_at)}\n"
    )
    return (
        "<memory_metadata>\n"
        f"- AGENT_ID: {agent_id}\n"
        f"{modified}"
        f"- {recall_messages} previous messages between you and the user are stored in recall "
        "memory (use tools to access them)\n"
        f"- {archival_records} total memories you created are stored in archival memory "
        "(use tools to access them)\n"
        "</memory_metadata>"
    )


def system_prompt_parts(system: str, memory: Sequence[str], metadata: str) -> list[str]:
    """The system prompt as pieces: template text, memory pieces and metadata.

    Memory and metadata go where `{CORE_MEMORY}` is (every occurrence), or after a blank
    line when the template has no placeholder.
    """
    core = [*memory, "\n\n", metadata] if any(memory) else [metadata]
    if CORE_MEMORY_PLACEHOLDER not in system:
        return [system, "\n\n", *core] if system else core
    pieces = system.split(CORE_MEMORY_PLACEHOLDER)
    parts = [pieces[0]]
    for piece in pieces[1:]:
        parts.extend(core)
        parts.append(piece)
    return parts


def assemble_system_prompt(system: str, memory: str, metadata: str) -> str:
    """Puts memory and metadata where `{CORE_MEMORY}` is, or after a blank line."""
    return "".join(system_prompt_parts(system, [memory], metadata))


def format_memory_update(memory: str, revision: str) -> str:
    """The memory-update text sent as a message in MESSAGE mode (DESIGN.md §3.3)."""
    return (
        f'<memory_update revision="{revision}">\n'
        "Your memory has changed since your system prompt was written. The memory below "
        "replaces the memory shown there.\n"
        f"{memory}\n</memory_update>"
    )


def sha256_hex(text: str) -> str:
    """SHA-256 of UTF-8 text, hex."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
