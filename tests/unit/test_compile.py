"""The prompt renderers, byte for byte (DESIGN.md §3.2)."""

from __future__ import annotations

from state_service.compile import (
    assemble_system_prompt,
    compile_memory,
    format_timestamp,
    render_blocks,
    render_memory_metadata,
    render_tool_rules,
)
from state_service.models import Block, MemoryMode, ToolRule, ToolRuleType


def block(label: str, value: str, **kw: object) -> Block:
    return Block(id=f"block-{label}", tenant="t", label=label, value=value, **kw)  # type: ignore[arg-type]


def test_no_blocks_render_as_empty_string() -> None:
    assert render_blocks([], MemoryMode.STANDARD) == ""
    assert render_blocks([], MemoryMode.LINE_NUMBERED) == ""
    assert compile_memory([], MemoryMode.STANDARD, []) == ""


def test_standard_renders_one_block_exactly() -> None:
    rendered = render_blocks(
        [block("human", "Name: Sam", description="About the user", limit=100)],
        MemoryMode.STANDARD,
    )
    assert rendered == (
        "<memory_blocks>\nThe following memory blocks are currently engaged in your core "
        "memory unit:\n\n"
        "<human>\n<description>\nAbout the user\n</description>\n<metadata>\n"
        "- chars_current=9\n- chars_limit=100\n</metadata>\n<value>\nName: Sam\n</value>\n"
        "</human>\n\n</memory_blocks>"
    )


def test_read_only_line_appears_only_for_read_only_blocks() -> None:
    rendered = render_blocks(
        [block("persona", "I help.", read_only=True), block("human", "")],
        MemoryMode.STANDARD,
    )
    assert rendered == (
        "<memory_blocks>\nThe following memory blocks are currently engaged in your core "
        "memory unit:\n\n"
        "<persona>\n<description>\n\n</description>\n<metadata>\n- read_only=true\n"
        "- chars_current=7\n- chars_limit=20000\n</metadata>\n<value>\nI help.\n</value>\n"
        "</persona>\n"
        "\n"
        "<human>\n<description>\n\n</description>\n<metadata>\n"
        "- chars_current=0\n- chars_limit=20000\n</metadata>\n<value>\n\n</value>\n"
        "</human>\n\n</memory_blocks>"
    )


def test_multi_line_value_is_kept_verbatim_in_standard_mode() -> None:
    rendered = render_blocks([block("notes", "a\nb\n\nc")], MemoryMode.STANDARD)
    assert "<value>\na\nb\n\nc\n</value>\n" in rendered
    assert "- chars_current=6\n" in rendered


def test_line_numbered_prefixes_each_line_and_warns() -> None:
    rendered = render_blocks(
        [block("notes", "first\nsecond\n", limit=50)], MemoryMode.LINE_NUMBERED
    )
    assert rendered == (
        "<memory_blocks>\nThe following memory blocks are currently engaged in your core "
        "memory unit:\n\n"
        "<notes>\n<description>\n\n</description>\n<metadata>\n"
        "- chars_current=13\n- chars_limit=50\n</metadata>\n"
        "<warning>\n# NOTE: Line numbers shown below (with arrows like '1→') are to help during "
        "editing. Do NOT include line number prefixes in your memory edit tool calls.\n"
        "</warning>\n"
        "<value>\n1→ first\n2→ second\n3→ \n</value>\n</notes>\n\n</memory_blocks>"
    )


def test_line_numbered_empty_value_writes_no_lines() -> None:
    rendered = render_blocks([block("notes", "")], MemoryMode.LINE_NUMBERED)
    assert "</warning>\n<value>\n</value>\n</notes>\n" in rendered


def test_hidden_blocks_are_not_rendered() -> None:
    rendered = render_blocks([block("secret", "x", hidden=True)], MemoryMode.STANDARD)
    assert rendered == ""


def test_blocks_render_in_the_given_order() -> None:
    first = render_blocks([block("b", "2"), block("a", "1")], MemoryMode.STANDARD)
    assert first.index("<b>") < first.index("<a>")


def test_tool_rules_render_letta_sentences() -> None:
    rules = [
        ToolRule(ToolRuleType.RUN_FIRST, "search"),
        ToolRule(ToolRuleType.EXIT_LOOP, "send_message"),
        ToolRule(ToolRuleType.CONTINUE_LOOP, "search"),
        ToolRule(ToolRuleType.CONSTRAIN_CHILD_TOOLS, "search", children=("a", "b")),
        ToolRule(ToolRuleType.MAX_COUNT_PER_STEP, "search", max_count=2),
        ToolRule(ToolRuleType.PARENT_LAST_TOOL, "login", children=("pay",)),
        ToolRule(ToolRuleType.REQUIRED_BEFORE_EXIT, "save"),
        ToolRule(ToolRuleType.CONDITIONAL, "route", default_child="a"),
    ]
    assert render_tool_rules(rules) == (
        "<tool_usage_rules>\nThe following constraints define rules for tool usage and guide "
        "desired behavior. These rules must be followed to ensure proper tool execution and "
        "workflow. A single response may contain multiple tool calls.\n\n"
        "<tool_rule>\nsend_message ends your response (yields control) when called\n</tool_rule>\n"
        "<tool_rule>\nsearch requires continuing your response when called\n</tool_rule>\n"
        "<tool_rule>\nAfter using search, you must use one of these tools: a, b\n</tool_rule>\n"
        "<tool_rule>\nsearch: at most 2 use(s) per response\n</tool_rule>\n"
        "<tool_rule>\npay can only be used after login\n</tool_rule>\n"
        "<tool_rule>save must be called before ending the conversation</tool_rule>\n"
        "<tool_rule>\nroute will determine which tool to use next based on its output\n"
        "</tool_rule>\n</tool_usage_rules>"
    )


def test_tool_rule_prompt_template_replaces_the_sentence() -> None:
    rules = [ToolRule(ToolRuleType.EXIT_LOOP, "done", prompt_template="Call {tool_name} last.")]
    assert render_tool_rules(rules).endswith("\n\nCall done last.\n</tool_usage_rules>")


def test_only_run_first_rules_render_nothing() -> None:
    assert render_tool_rules([ToolRule(ToolRuleType.RUN_FIRST, "x")]) == ""


def test_tool_rules_follow_memory_after_a_blank_line() -> None:
    memory = compile_memory(
        [block("h", "v")], MemoryMode.STANDARD, [ToolRule(ToolRuleType.EXIT_LOOP, "done")]
    )
    assert memory.endswith(
        "</memory_blocks>\n\n<tool_usage_rules>\n"
        + "The following constraints define rules for tool usage and guide desired behavior. "
        "These rules must be followed to ensure proper tool execution and workflow. A single "
        "response may contain multiple tool calls.\n\n<tool_rule>\ndone ends your response "
        "(yields control) when called\n</tool_rule>\n</tool_usage_rules>"
    )


def test_timestamps_use_letta_format_in_utc() -> None:
    assert format_timestamp(0) == "1970-01-01 12:00:00 AM UTC+0000"
    assert format_timestamp(1_780_000_000.9) == "2026-05-28 08:26:40 PM UTC+0000"


def test_memory_metadata_section() -> None:
    assert render_memory_metadata("agent-1", 0, 3, 7) == (
        "<memory_metadata>\n- AGENT_ID: agent-1\n"
        "- Memory blocks were last modified: 1970-01-01 12:00:00 AM UTC+0000\n"
        "- 3 previous messages between you and the user are stored in recall memory "
        "(use tools to access them)\n"
        "- 7 total memories you created are stored in archival memory "
        "(use tools to access them)\n</memory_metadata>"
    )


def test_placeholder_is_replaced_by_memory_and_metadata() -> None:
    assert assemble_system_prompt("A {CORE_MEMORY} Z", "MEM", "META") == "A MEM\n\nMETA Z"


def test_memory_is_appended_after_a_blank_line_without_placeholder() -> None:
    assert assemble_system_prompt("You are helpful.", "MEM", "META") == (
        "You are helpful.\n\nMEM\n\nMETA"
    )


def test_empty_memory_leaves_only_metadata() -> None:
    assert assemble_system_prompt("S", "", "META") == "S\n\nMETA"
    assert assemble_system_prompt("", "", "META") == "META"


def test_compilation_is_deterministic() -> None:
    blocks = [block("a", "x\ny", read_only=True), block("b", "z")]
    rules = [ToolRule(ToolRuleType.EXIT_LOOP, "done")]
    first = compile_memory(blocks, MemoryMode.LINE_NUMBERED, rules)
    assert compile_memory(list(blocks), MemoryMode.LINE_NUMBERED, list(rules)) == first
