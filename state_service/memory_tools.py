"""The memory tools the model calls: their schemas, and the pure edits they make.

`plan_call` turns one tool call into an `Edit` of one block's value, a `Refusal` whose text
tells the model exactly what was wrong (and nothing changes), a `Done` without an edit, or a
`RecallCall` for the tools the recall service answers. Nothing here touches a store.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from state_service.models import Block


class ToolError(StrEnum):
    """Why a call was refused."""

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


@dataclass(frozen=True, slots=True)
class Edit:
    """Set block `label` to `new_value`; `text` is what the model sees afterwards; `reason`
    is the model's own note on the edit (a MemFS commit message)."""

    label: str
    new_value: str
    text: str
    reason: str = ""


@dataclass(frozen=True, slots=True)
class Refusal:
    """The call changes nothing; `text` explains why."""

    error: ToolError
    text: str


@dataclass(frozen=True, slots=True)
class Done:
    """The call succeeds without an edit."""

    text: str


@dataclass(frozen=True, slots=True)
class RecallCall:
    """A call the recall service answers, with validated arguments."""

    tool: str
    arguments: dict[str, Any]


Outcome = Edit | Refusal | Done | RecallCall

EDITED = (
    "The core memory block with label `{label}` has been edited. Review the changes and make "
    "sure they are as expected (correct indentation, no duplicate lines, etc). Edit the memory "
    "block again if necessary."
)
FINISHED = "Memory edits finished."

_STRING = {"type": "string"}
_STRINGS = {"type": "array", "items": {"type": "string"}}
_TIME = {"type": "string", "description": "ISO 8601 date or datetime, inclusive"}


_REASON = {
    "type": "string",
    "description": "Optional: why you are making this edit (kept in the memory's history).",
}


def _tool(
    name: str, description: str, props: dict[str, Any], required: list[str]
) -> dict[str, Any]:
    if "label" in props:
        props = {**props, "reason": _REASON}
    return {
        "name": name,
        "description": description,
        "parameters": {
            "type": "object",
            "properties": props,
            "required": required,
            "additionalProperties": False,
        },
    }


_LABEL = {"type": "string", "description": "The label of the memory block to edit."}

MEMORY_TOOLS: tuple[dict[str, Any], ...] = (
    _tool(
        "core_memory_append",
        "Append text to a memory block, on a new line.",
        {"label": _LABEL, "content": {"type": "string", "description": "The text to append."}},
        ["label", "content"],
    ),
    _tool(
        "core_memory_replace",
        "Replace every occurrence of old_content in a memory block with new_content. To "
        "delete text, use an empty new_content.",
        {
            "label": _LABEL,
            "old_content": {"type": "string", "description": "The exact text to replace."},
            "new_content": {"type": "string", "description": "The text to put in its place."},
        },
        ["label", "old_content", "new_content"],
    ),
    _tool(
        "memory_replace",
        "Replace the one exact occurrence of old_string in a memory block with new_string. "
        "Do not include line numbers.",
        {
            "label": _LABEL,
            "old_string": {"type": "string", "description": "Text occurring exactly once."},
            "new_string": {"type": "string", "description": "The replacement text."},
        },
        ["label", "old_string", "new_string"],
    ),
    _tool(
        "memory_insert",
        "Insert text into a memory block after line insert_line (0 inserts at the beginning, "
        "-1 at the end). Do not include line numbers.",
        {
            "label": _LABEL,
            "new_string": {"type": "string", "description": "The text to insert."},
            "insert_line": {
                "type": "integer",
                "description": "The line after which to insert; 0 = beginning, -1 = end.",
                "default": -1,
            },
        },
        ["label", "new_string"],
    ),
    _tool(
        "memory_rethink",
        "Rewrite a whole memory block with new_memory, replacing its value.",
        {
            "label": _LABEL,
            "new_memory": {"type": "string", "description": "The block's new value."},
        },
        ["label", "new_memory"],
    ),
    _tool("memory_finish_edits", "Call when you have finished editing memory.", {}, []),
    _tool(
        "archival_memory_insert",
        "Store a passage in long-term archival memory, searchable later.",
        {"content": {"type": "string", "description": "The passage."}, "tags": _STRINGS},
        ["content"],
    ),
    _tool(
        "archival_memory_search",
        "Search long-term archival memory by meaning and keywords.",
        {
            "query": _STRING,
            "tags": _STRINGS,
            "top_k": {"type": "integer", "minimum": 1, "maximum": 100},
            "start": _TIME,
            "end": _TIME,
        },
        ["query"],
    ),
    _tool(
        "conversation_search",
        "Search past messages of your conversation history.",
        {
            "query": _STRING,
            "roles": {
                "type": "array",
                "items": {"type": "string", "enum": ["user", "assistant", "tool", "system"]},
            },
            "limit": {"type": "integer", "minimum": 1, "maximum": 100},
            "start": _TIME,
            "end": _TIME,
        },
        ["query"],
    ),
)
MEMORY_TOOL_NAMES = frozenset(tool["name"] for tool in MEMORY_TOOLS)
RECALL_TOOLS = frozenset(
    {"archival_memory_insert", "archival_memory_search", "conversation_search"}
)

# Names accepted for compatibility with Letta's memory tools.
_ALIASES = {"old_str": "old_string", "new_str": "new_string"}
_LINE_PREFIX = re.compile(r"(?m)^[ \t]*\d+→|^Line \d+: ")
_KIND = {"string": str, "integer": int, "array": list}


class _BadArguments(Exception):
    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text


def _arguments(tool: dict[str, Any], raw: str) -> dict[str, Any]:
    name = tool["name"]
    try:
        value = json.loads(raw) if raw.strip() else {}
    except json.JSONDecodeError as error:
        raise _BadArguments(
            f"Error: the arguments of {name} are not valid JSON ({error.msg} at position "
            f"{error.pos}); nothing was changed. Call {name} again with a JSON object."
        ) from None
    if not isinstance(value, dict):
        raise _BadArguments(
            f"Error: the arguments of {name} must be a JSON object; nothing was changed."
        )
    args = {_ALIASES.get(str(k), str(k)): v for k, v in value.items()}
    props = tool["parameters"]["properties"]
    for field in tool["parameters"]["required"]:
        if field not in args:
            raise _BadArguments(
                f"Error: {name} needs the argument '{field}' ({props[field]['type']}); "
                "nothing was changed."
            )
    for field, spec in props.items():
        if field not in args or args[field] is None:
            continue
        kind = _KIND[spec["type"]]
        wrong = not isinstance(args[field], kind) or (kind is int and isinstance(args[field], bool))
        if kind is list and not wrong:
            wrong = not all(isinstance(item, str) for item in args[field])
        if wrong:
            expected = {list: "a list of strings", int: "an integer", str: "a string"}[kind]
            raise _BadArguments(
                f"Error: the argument '{field}' of {name} must be {expected}; nothing was changed."
            )
    return {k: v for k, v in args.items() if k in props}


def _find_block(label: str, blocks: Sequence[Block]) -> Block | Refusal:
    visible = [b for b in blocks if not b.hidden]
    for block in visible:
        if block.label == label:
            if block.read_only:
                return Refusal(
                    ToolError.READ_ONLY,
                    f"Error: the memory block `{label}` is read-only and cannot be edited; "
                    "nothing was changed.",
                )
            return block
    names = ", ".join(b.label for b in visible) or "(none)"
    return Refusal(
        ToolError.UNKNOWN_LABEL,
        f"Error: there is no memory block labelled `{label}`; nothing was changed. "
        f"Existing labels: {names}.",
    )


def _line_prefix(name: str, args: dict[str, Any], fields: Sequence[str]) -> Refusal | None:
    for field in fields:
        if _LINE_PREFIX.search(args.get(field, "")):
            return Refusal(
                ToolError.LINE_NUMBER_PREFIX,
                f"Error: the argument '{field}' of {name} contains line-number prefixes (like "
                "'1→ '), which are only shown to help you find lines; nothing was changed. "
                "Call the tool again without them.",
            )
    return None


def _fits(block: Block, new_value: str) -> Refusal | None:
    if len(new_value) <= block.limit:
        return None
    over = len(new_value) - block.limit
    return Refusal(
        ToolError.LIMIT_EXCEEDED,
        f"Error: the edit would make the memory block `{block.label}` {len(new_value)} "
        f"characters long, {over} over its limit of {block.limit}; nothing was changed. "
        "Shorten the text or remove something first.",
    )


def _lines_of(value: str, needle: str) -> list[int]:
    lines = []
    start = value.find(needle)
    while start != -1:
        lines.append(value.count("\n", 0, start) + 1)
        start = value.find(needle, start + 1)
    return lines


def _edit(name: str, args: dict[str, Any], block: Block) -> Edit | Refusal:
    value = block.value
    label = block.label
    if name == "core_memory_append":
        new_value = f"{value}\n{args['content']}" if value else str(args["content"])
    elif name == "core_memory_replace":
        old = args["old_content"]
        if not old or old not in value:
            return Refusal(
                ToolError.TEXT_NOT_FOUND,
                f"Error: old_content {old!r} does not occur in the memory block `{label}`; "
                "nothing was changed. Copy the text exactly as it appears in the block.",
            )
        new_value = value.replace(old, args["new_content"])
    elif name == "memory_replace":
        old = args["old_string"]
        found_at = _lines_of(value, old) if old else []
        if not found_at:
            return Refusal(
                ToolError.TEXT_NOT_FOUND,
                f"Error: old_string {old!r} does not occur in the memory block `{label}`; "
                "nothing was changed. Copy the text exactly as it appears in the block.",
            )
        if len(found_at) > 1:
            where = ", ".join(str(n) for n in found_at)
            return Refusal(
                ToolError.AMBIGUOUS,
                f"Error: old_string {old!r} occurs {len(found_at)} times in the memory block "
                f"`{label}` (lines {where}); nothing was changed. Include more of the "
                "surrounding text so that it occurs exactly once.",
            )
        new_value = value.replace(old, args["new_string"], 1)
    elif name == "memory_insert":
        lines = value.split("\n") if value else []
        at = args.get("insert_line", -1)
        if at is None:
            at = -1
        if at == -1:
            at = len(lines)
        if not 0 <= at <= len(lines):
            return Refusal(
                ToolError.INSERT_LINE_OUT_OF_RANGE,
                f"Error: insert_line {args['insert_line']} is outside the memory block "
                f"`{label}`, which has {len(lines)} lines; nothing was changed. Use 0 to insert "
                f"at the beginning and {len(lines)} or -1 to insert at the end.",
            )
        new_value = "\n".join([*lines[:at], *args["new_string"].split("\n"), *lines[at:]])
    else:  # memory_rethink
        new_value = args["new_memory"]
    return _fits(block, new_value) or Edit(
        label, new_value, EDITED.format(label=label), str(args.get("reason") or "")
    )


_TEXT_FIELDS = {
    "core_memory_append": ("content",),
    "core_memory_replace": ("old_content", "new_content"),
    "memory_replace": ("old_string", "new_string"),
    "memory_insert": ("new_string",),
    "memory_rethink": ("new_memory",),
}
_BY_NAME = {tool["name"]: tool for tool in MEMORY_TOOLS}


def plan_call(name: str, arguments_json: str, blocks: Sequence[Block]) -> Outcome:
    """What the memory tool call `name(arguments_json)` does to an agent with `blocks`."""
    tool = _BY_NAME.get(name)
    if tool is None:
        return Refusal(
            ToolError.UNKNOWN_TOOL,
            f"Error: there is no memory tool named `{name}`. Memory tools: "
            f"{', '.join(t['name'] for t in MEMORY_TOOLS)}.",
        )
    try:
        args = _arguments(tool, arguments_json)
    except _BadArguments as error:
        return Refusal(ToolError.INVALID_ARGUMENTS, error.text)
    if name in RECALL_TOOLS:
        return RecallCall(name, args)
    if name == "memory_finish_edits":
        return Done(FINISHED)
    refusal = _line_prefix(name, args, _TEXT_FIELDS[name])
    if refusal is not None:
        return refusal
    found = _find_block(args["label"], blocks)
    if isinstance(found, Refusal):
        return found
    return _edit(name, args, found)
