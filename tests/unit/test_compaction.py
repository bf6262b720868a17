"""The sliding-window cut of compaction, as a pure function."""

from __future__ import annotations

from state_service.compaction import choose_cut, valid_cuts
from state_service.models import Message, Role, ToolCall


def msg(role: Role, tokens: int, calls: int = 0) -> Message:
    tool_calls = tuple(ToolCall(f"c{i}", "f", "{}") for i in range(calls))
    return Message(id=f"m{tokens}", agent_id="a", role=role, tokens=tokens, tool_calls=tool_calls)


U, A, T = Role.USER, Role.ASSISTANT, Role.TOOL


def test_cuts_only_after_assistant_messages() -> None:
    window = [msg(U, 1), msg(A, 2), msg(U, 3), msg(A, 4)]
    assert valid_cuts(window) == [1, 3]


def test_never_cuts_between_a_tool_call_and_its_result() -> None:
    window = [msg(U, 1), msg(A, 2, calls=1), msg(T, 3), msg(A, 4), msg(U, 5), msg(A, 6)]
    assert valid_cuts(window) == [3, 5]


def test_assistant_followed_by_a_tool_message_is_no_cut() -> None:
    window = [msg(U, 1), msg(A, 2), msg(T, 3), msg(A, 4)]
    assert valid_cuts(window) == [3]


def test_smallest_cut_that_frees_enough_is_chosen() -> None:
    window = [msg(U, 10), msg(A, 10), msg(U, 10), msg(A, 10), msg(U, 10), msg(A, 10)]
    assert choose_cut(window, 25) == 3
    assert choose_cut(window, 20) == 1
    assert choose_cut(window, 41) == 5


def test_largest_cut_when_nothing_frees_enough() -> None:
    window = [msg(U, 10), msg(A, 10), msg(U, 100)]
    assert choose_cut(window, 1000) == 1


def test_no_cut_without_an_assistant_message() -> None:
    assert choose_cut([msg(U, 10), msg(U, 10)], 5) is None
    assert choose_cut([], 5) is None
