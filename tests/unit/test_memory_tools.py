"""The memory tools' edits and refusals, as pure functions (exact texts)."""

from __future__ import annotations

import json

import pytest

from state_service.memory_tools import (
    EDITED,
    FINISHED,
    MEMORY_TOOL_NAMES,
    MEMORY_TOOLS,
    Done,
    Edit,
    RecallCall,
    Refusal,
    ToolError,
    plan_call,
)
from state_service.models import Block


def blocks() -> list[Block]:
    return [
        Block(
            id="b1", tenant="t", label="human", value="Name: Sam\nLikes: tea\nLikes: cake", limit=60
        ),
        Block(id="b2", tenant="t", label="persona", value="I am helpful.", read_only=True),
        Block(id="b3", tenant="t", label="secret", value="hidden", hidden=True),
        Block(id="b4", tenant="t", label="notes", value="", limit=10),
    ]


def call(name: str, **args: object) -> object:
    return plan_call(name, json.dumps(args), blocks())


def edited(label: str, value: str) -> Edit:
    return Edit(label, value, EDITED.format(label=label))


def test_schemas_are_openai_functions_with_unique_names() -> None:
    assert len(MEMORY_TOOL_NAMES) == len(MEMORY_TOOLS) == 9
    for tool in MEMORY_TOOLS:
        assert set(tool) == {"name", "description", "parameters"}
        assert tool["parameters"]["type"] == "object"
        assert set(tool["parameters"]["required"]) <= set(tool["parameters"]["properties"])


def test_core_memory_append_adds_a_line() -> None:
    assert call("core_memory_append", label="human", content="Job: nurse") == edited(
        "human", "Name: Sam\nLikes: tea\nLikes: cake\nJob: nurse"
    )


def test_core_memory_append_to_empty_block_has_no_leading_newline() -> None:
    assert call("core_memory_append", label="notes", content="x") == edited("notes", "x")


def test_core_memory_replace_replaces_every_occurrence() -> None:
    assert call(
        "core_memory_replace", label="human", old_content="Likes", new_content="Loves"
    ) == edited("human", "Name: Sam\nLoves: tea\nLoves: cake")


def test_memory_replace_replaces_the_one_occurrence() -> None:
    assert call("memory_replace", label="human", old_string="Sam", new_string="Samuel") == edited(
        "human", "Name: Samuel\nLikes: tea\nLikes: cake"
    )


def test_memory_replace_accepts_lettas_argument_names() -> None:
    assert call("memory_replace", label="human", old_str="tea", new_str="coffee") == edited(
        "human", "Name: Sam\nLikes: coffee\nLikes: cake"
    )


def test_memory_insert_after_a_line_at_the_start_and_at_the_end() -> None:
    assert call("memory_insert", label="human", new_string="Age: 30", insert_line=1) == edited(
        "human", "Name: Sam\nAge: 30\nLikes: tea\nLikes: cake"
    )
    assert call("memory_insert", label="human", new_string="# User", insert_line=0) == edited(
        "human", "# User\nName: Sam\nLikes: tea\nLikes: cake"
    )
    assert call("memory_insert", label="human", new_string="End") == edited(
        "human", "Name: Sam\nLikes: tea\nLikes: cake\nEnd"
    )
    assert call("memory_insert", label="notes", new_string="a\nb", insert_line=0) == edited(
        "notes", "a\nb"
    )


def test_memory_rethink_rewrites_the_block() -> None:
    assert call("memory_rethink", label="human", new_memory="Name: Sam") == edited(
        "human", "Name: Sam"
    )


def test_memory_finish_edits_changes_nothing() -> None:
    assert call("memory_finish_edits") == Done(FINISHED)


def test_recall_tools_are_handed_to_the_recall_service() -> None:
    assert call("archival_memory_insert", content="fact", tags=["a"]) == RecallCall(
        "archival_memory_insert", {"content": "fact", "tags": ["a"]}
    )
    assert call("conversation_search", query="tea", limit=5) == RecallCall(
        "conversation_search", {"query": "tea", "limit": 5}
    )


def test_unknown_extra_arguments_are_ignored() -> None:
    assert call("core_memory_append", label="notes", content="y", request_heartbeat=True) == edited(
        "notes", "y"
    )


def test_read_only_block_is_refused() -> None:
    assert call("core_memory_append", label="persona", content="x") == Refusal(
        ToolError.READ_ONLY,
        "Error: the memory block `persona` is read-only and cannot be edited; nothing was changed.",
    )


def test_unknown_label_lists_the_labels_that_exist() -> None:
    assert call("memory_rethink", label="humans", new_memory="x") == Refusal(
        ToolError.UNKNOWN_LABEL,
        "Error: there is no memory block labelled `humans`; nothing was changed. Existing "
        "labels: human, persona, notes.",
    )


def test_hidden_blocks_are_unknown_to_the_model() -> None:
    result = call("memory_rethink", label="secret", new_memory="x")
    assert isinstance(result, Refusal)
    assert result.error is ToolError.UNKNOWN_LABEL


def test_old_content_not_found_is_refused() -> None:
    assert call(
        "core_memory_replace", label="human", old_content="coffee", new_content="x"
    ) == Refusal(
        ToolError.TEXT_NOT_FOUND,
        "Error: old_content 'coffee' does not occur in the memory block `human`; nothing was "
        "changed. Copy the text exactly as it appears in the block.",
    )
    assert call("memory_replace", label="human", old_string="coffee", new_string="x") == Refusal(
        ToolError.TEXT_NOT_FOUND,
        "Error: old_string 'coffee' does not occur in the memory block `human`; nothing was "
        "changed. Copy the text exactly as it appears in the block.",
    )


def test_ambiguous_memory_replace_lists_the_lines() -> None:
    assert call("memory_replace", label="human", old_string="Likes", new_string="x") == Refusal(
        ToolError.AMBIGUOUS,
        "Error: old_string 'Likes' occurs 2 times in the memory block `human` (lines 2, 3); "
        "nothing was changed. Include more of the surrounding text so that it occurs exactly "
        "once.",
    )


@pytest.mark.parametrize(
    ("tool", "args", "field"),
    [
        (
            "memory_replace",
            {"label": "human", "old_string": "2→ Likes: tea", "new_string": "x"},
            "old_string",
        ),
        (
            "memory_replace",
            {"label": "human", "old_string": "tea", "new_string": "1→ x"},
            "new_string",
        ),
        ("memory_insert", {"label": "human", "new_string": "a\n3→ b"}, "new_string"),
        ("core_memory_append", {"label": "human", "content": "Line 4: x"}, "content"),
    ],
)
def test_line_number_prefixes_are_refused(tool: str, args: dict[str, object], field: str) -> None:
    assert plan_call(tool, json.dumps(args), blocks()) == Refusal(
        ToolError.LINE_NUMBER_PREFIX,
        f"Error: the argument '{field}' of {tool} contains line-number prefixes (like '1→ '), "
        "which are only shown to help you find lines; nothing was changed. Call the tool "
        "again without them.",
    )


@pytest.mark.parametrize("line", [4, 99, -2])
def test_insert_line_out_of_range_is_refused(line: int) -> None:
    assert call("memory_insert", label="human", new_string="x", insert_line=line) == Refusal(
        ToolError.INSERT_LINE_OUT_OF_RANGE,
        f"Error: insert_line {line} is outside the memory block `human`, which has 3 lines; "
        "nothing was changed. Use 0 to insert at the beginning and 3 or -1 to insert at the "
        "end.",
    )


def test_edit_past_the_limit_says_by_how_much() -> None:
    assert call("core_memory_append", label="notes", content="0123456789AB") == Refusal(
        ToolError.LIMIT_EXCEEDED,
        "Error: the edit would make the memory block `notes` 12 characters long, 2 over its "
        "limit of 10; nothing was changed. Shorten the text or remove something first.",
    )


def test_arguments_that_are_not_json_are_refused() -> None:
    assert plan_call("core_memory_append", "{label: human}", blocks()) == Refusal(
        ToolError.INVALID_ARGUMENTS,
        "Error: the arguments of core_memory_append are not valid JSON (Expecting property "
        "name enclosed in double quotes at position 1); nothing was changed. Call "
        "core_memory_append again with a JSON object.",
    )
    assert plan_call("core_memory_append", "[1, 2]", blocks()) == Refusal(
        ToolError.INVALID_ARGUMENTS,
        "Error: the arguments of core_memory_append must be a JSON object; nothing was changed.",
    )


def test_missing_field_is_refused() -> None:
    assert call("core_memory_append", label="human") == Refusal(
        ToolError.INVALID_ARGUMENTS,
        "Error: core_memory_append needs the argument 'content' (string); nothing was changed.",
    )


def test_wrong_type_is_refused() -> None:
    assert call("memory_insert", label="human", new_string="x", insert_line="2") == Refusal(
        ToolError.INVALID_ARGUMENTS,
        "Error: the argument 'insert_line' of memory_insert must be an integer; nothing was "
        "changed.",
    )
    assert call("archival_memory_insert", content="x", tags="a") == Refusal(
        ToolError.INVALID_ARGUMENTS,
        "Error: the argument 'tags' of archival_memory_insert must be a list of strings; "
        "nothing was changed.",
    )


def test_unknown_tool_is_refused() -> None:
    assert call("core_memory_delete", label="human") == Refusal(
        ToolError.UNKNOWN_TOOL,
        "Error: there is no memory tool named `core_memory_delete`. Memory tools: "
        "core_memory_append, core_memory_replace, memory_replace, memory_insert, "
        "memory_rethink, memory_finish_edits, archival_memory_insert, archival_memory_search, "
        "conversation_search.",
    )
