"""How domain values are stored in text columns; shared by the SQLite and PostgreSQL stores."""

from __future__ import annotations

import json
from collections.abc import Sequence

from state_service.models import Tool, ToolCall, ToolRule, ToolRuleType


def tools_to_json(tools: Sequence[Tool]) -> str:
    """Tools as stored."""
    return json.dumps(
        [
            {"name": t.name, "description": t.description, "parameters": t.parameters_json}
            for t in tools
        ]
    )


def tools_from_json(text: str) -> list[Tool]:
    """Tools from their stored form."""
    return [Tool(t["name"], t["description"], t["parameters"]) for t in json.loads(text)]


def rules_to_json(rules: Sequence[ToolRule]) -> str:
    """Tool rules as stored."""
    return json.dumps(
        [
            {
                "type": r.type.value,
                "tool_name": r.tool_name,
                "children": list(r.children),
                "max_count": r.max_count,
                "default_child": r.default_child,
                "child_output_mapping": [list(pair) for pair in r.child_output_mapping],
                "prompt_template": r.prompt_template,
            }
            for r in rules
        ]
    )


def rules_from_json(text: str) -> list[ToolRule]:
    """Tool rules from their stored form."""
    return [
        ToolRule(
            type=ToolRuleType(r["type"]),
            tool_name=r["tool_name"],
            children=tuple(r["children"]),
            max_count=r["max_count"],
            default_child=r["default_child"],
            child_output_mapping=tuple((k, v) for k, v in r["child_output_mapping"]),
            prompt_template=r["prompt_template"],
        )
        for r in json.loads(text)
    ]


def calls_to_json(calls: Sequence[ToolCall]) -> str:
    """Tool calls as stored."""
    return json.dumps([[c.id, c.name, c.arguments_json] for c in calls]) if calls else "[]"


def calls_from_json(text: str) -> tuple[ToolCall, ...]:
    """Tool calls from their stored form."""
    if text == "[]":
        return ()
    return tuple(ToolCall(i, n, a) for i, n, a in json.loads(text))
