"""The arguments of the recall search tools, read into a search (no server)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from state_service.recall_link import Found, SearchScope
from state_service.recall_tools import (
    BadSearch,
    archival_results,
    conversation_results,
    search_scope,
)


def test_a_date_covers_its_whole_day_and_a_datetime_its_instant() -> None:
    scope = search_scope(
        {"query": " tea ", "start": "2026-11-02", "end": "2026-11-03"}, "top_k", ("cat",)
    )
    assert scope == SearchScope(
        query="tea",
        top_k=10,
        tags_any=("cat",),
        start=datetime(2026, 11, 2, tzinfo=UTC),
        end=datetime(2026, 11, 4, tzinfo=UTC),
    )
    exact = search_scope(
        {"query": "tea", "start": "2026-11-02T10:00:00+02:00", "end": "2026-11-02T12:00:00"},
        "limit",
        (),
    )
    assert (exact.start, exact.end) == (
        datetime(2026, 11, 2, 8, 0, tzinfo=UTC),
        datetime(2026, 11, 2, 12, 0, 0, 1, tzinfo=UTC),
    )


def test_the_count_argument_is_taken_by_name() -> None:
    assert search_scope({"query": "tea", "limit": 3}, "limit", ()).top_k == 3
    assert search_scope({"query": "tea", "limit": 3}, "top_k", ()).top_k == 10


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"query": "   "}, "'query' must say what to look for"),
        (
            {"query": "tea", "start": "last tuesday"},
            "'start' must be an ISO 8601 date (2026-11-30) or datetime (2026-11-30T14:00:00Z), "
            "not 'last tuesday'",
        ),
        (
            {"query": "tea", "start": "2026-11-03", "end": "2026-11-02"},
            "'start' must not be after 'end'",
        ),
    ],
)
def test_unsearchable_arguments_say_why(arguments: dict[str, object], message: str) -> None:
    with pytest.raises(BadSearch) as raised:
        search_scope(arguments, "top_k", ())
    assert str(raised.value) == message


def _found(seq: int, content: str, metadata: dict[str, object]) -> Found:
    return Found(seq, content, ("role:user",), datetime(2026, 11, 2, 9, 30, tzinfo=UTC), metadata)


def test_results_are_json_rows_best_first_with_the_message_time_when_known() -> None:
    found = [
        _found(4, "Miso is a cat", {"role": "user", "created_at": "2026-11-01T08:00:00Z"}),
        _found(2, "tea at four", {}),
    ]
    assert conversation_results(found) == (
        '[{"timestamp": "2026-11-01T08:00:00Z", "role": "user", "content": "Miso is a cat"}, '
        '{"timestamp": "2026-11-02T09:30:00Z", "role": "", "content": "tea at four"}]'
    )
    assert archival_results(found[1:]) == (
        '[{"timestamp": "2026-11-02T09:30:00Z", "content": "tea at four", "tags": ["role:user"]}]'
    )
    assert archival_results([]) == "No passages in archival memory match."
    assert conversation_results([]) == "No messages in your conversation history match."
