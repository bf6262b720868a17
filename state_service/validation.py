"""Input checks for agents and blocks; each failure names the field and the rule."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence

from cairn_server.errors import InvalidArgument
from state_service.models import Block, Tool, ToolRule, ToolRuleType

LABEL_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_-]{0,99}")
TOOL_NAME_RE = re.compile(r"[A-Za-z0-9_-]{1,64}")
MAX_LIMIT = 1_000_000
MAX_TAGS = 64
MAX_TAG_LENGTH = 100
MAX_NAME_LENGTH = 200
MAX_CONTEXT_WINDOW = 10_000_000


def check_label(field: str, label: str) -> None:
    """Labels become XML tag names: 1-100 of [A-Za-z0-9_-], not starting with a digit or -."""
    if not label:
        raise InvalidArgument(field, "must not be empty")
    if not LABEL_RE.fullmatch(label):
        raise InvalidArgument(
            field,
            f"{label!r} is not tag-safe: use 1-100 characters of [A-Za-z0-9_-], starting with "
            "a letter or underscore",
        )


def check_limit(field: str, limit: int) -> None:
    """A block limit is 1 to 1,000,000 characters."""
    if not 1 <= limit <= MAX_LIMIT:
        raise InvalidArgument(field, f"must be between 1 and {MAX_LIMIT}, got {limit}")


def check_value_fits(field: str, value: str, limit: int) -> None:
    """A value may not be longer than its block's limit."""
    if len(value) > limit:
        raise InvalidArgument(
            field,
            f"is {len(value)} characters, longer than the block's limit of {limit} "
            f"(by {len(value) - limit})",
        )


def check_tags(field: str, tags: Sequence[str]) -> None:
    """Up to 64 tags of 1-100 printable characters."""
    if len(tags) > MAX_TAGS:
        raise InvalidArgument(field, f"at most {MAX_TAGS} tags, got {len(tags)}")
    for i, tag in enumerate(tags):
        if not tag or len(tag) > MAX_TAG_LENGTH or not tag.isprintable():
            raise InvalidArgument(
                f"{field}[{i}]", f"tags are 1-{MAX_TAG_LENGTH} printable characters, got {tag!r}"
            )


def check_block(field: str, block: Block) -> None:
    """Every rule a block must satisfy on its own."""
    check_label(f"{field}.label", block.label)
    check_limit(f"{field}.limit", block.limit)
    check_value_fits(f"{field}.value", block.value, block.limit)
    check_tags(f"{field}.tags", block.tags)


def check_unique_labels(field: str, labels: Iterable[str]) -> None:
    """One label per agent."""
    seen: set[str] = set()
    for label in labels:
        if label in seen:
            raise InvalidArgument(field, f"label {label!r} is used by two blocks of one agent")
        seen.add(label)


def check_name(field: str, name: str) -> None:
    """Agent names: 1-200 characters."""
    if not name.strip():
        raise InvalidArgument(field, "must not be empty")
    if len(name) > MAX_NAME_LENGTH:
        raise InvalidArgument(field, f"at most {MAX_NAME_LENGTH} characters, got {len(name)}")


def check_context_window(field: str, window: int) -> None:
    """A context window is 1 to 10,000,000 tokens."""
    if not 1 <= window <= MAX_CONTEXT_WINDOW:
        raise InvalidArgument(field, f"must be between 1 and {MAX_CONTEXT_WINDOW}, got {window}")


def check_tools(field: str, tools: Sequence[Tool], reserved: frozenset[str]) -> None:
    """Tool names are unique, OpenAI-safe and not reserved; parameters are a JSON object."""
    seen: set[str] = set()
    for i, tool in enumerate(tools):
        where = f"{field}[{i}]"
        if not TOOL_NAME_RE.fullmatch(tool.name):
            raise InvalidArgument(
                f"{where}.name", f"must be 1-64 characters of [A-Za-z0-9_-], got {tool.name!r}"
            )
        if tool.name in seen:
            raise InvalidArgument(f"{where}.name", f"tool {tool.name!r} is given twice")
        if tool.name in reserved:
            raise InvalidArgument(
                f"{where}.name", f"{tool.name!r} is a built-in memory tool and cannot be redefined"
            )
        seen.add(tool.name)
        try:
            schema = json.loads(tool.parameters_json)
        except json.JSONDecodeError as error:
            raise InvalidArgument(
                f"{where}.parameters_json", f"is not valid JSON: {error.msg} at {error.pos}"
            ) from None
        if not isinstance(schema, dict):
            raise InvalidArgument(f"{where}.parameters_json", "must be a JSON Schema object")
        if schema.get("type", "object") != "object":
            raise InvalidArgument(
                f"{where}.parameters_json", "the arguments' schema must have type 'object'"
            )


def check_tool_rules(field: str, rules: Sequence[ToolRule]) -> None:
    """Each rule names its tool and carries what its type needs."""
    for i, rule in enumerate(rules):
        where = f"{field}[{i}]"
        if not TOOL_NAME_RE.fullmatch(rule.tool_name):
            raise InvalidArgument(f"{where}.tool_name", f"is not a tool name: {rule.tool_name!r}")
        needs_children = (ToolRuleType.CONSTRAIN_CHILD_TOOLS, ToolRuleType.PARENT_LAST_TOOL)
        if rule.type in needs_children and not rule.children:
            raise InvalidArgument(f"{where}.children", f"a {rule.type.value} rule needs children")
        if rule.type is ToolRuleType.MAX_COUNT_PER_STEP and rule.max_count < 1:
            raise InvalidArgument(f"{where}.max_count", "must be at least 1")
        if (
            rule.type is ToolRuleType.CONDITIONAL
            and not rule.child_output_mapping
            and not rule.default_child
        ):
            raise InvalidArgument(
                f"{where}.child_output_mapping",
                "a conditional rule needs child_output_mapping or default_child",
            )
