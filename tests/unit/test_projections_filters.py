"""How much of a filter an index must apply given the streams it holds (`needed`), the held
streams themselves (`HeldStreams`), and the check of the hits a lighter search returned
(`within`)."""

from __future__ import annotations

import pytest

from recall_service.projections.documents import RecordKey
from recall_service.projections.filters import HeldStreams, SearchFilter, needed, within
from recall_service.projections.hits import LaneHit

ALONE = HeldStreams.of(["t1/a", "t1/b"])
SHARED = HeldStreams.of(["t1/a", "t1/b", "t2/a"])


@pytest.mark.parametrize(
    ("flt", "alone", "shared"),
    [
        (SearchFilter("t1", ("t1/a", "t1/b")), "none", "tenant"),
        (SearchFilter("t1", ("t1/b", "t1/a", "t1/never-written")), "none", "tenant"),
        (SearchFilter("t1", ("t1/a",)), "streams", "streams"),  # t1/b's records would pass
        (SearchFilter("t1", ("t1/a", "t1/c")), "streams", "streams"),
        (SearchFilter("t1", ("t1/a", "t1/b"), authors=("ana",)), "streams", "streams"),
        (SearchFilter("t1", ("t1/a", "t1/b"), start=0.0), "streams", "streams"),
        (SearchFilter("t1", ("t1/a", "t1/b"), end=10.0), "streams", "streams"),
        (SearchFilter("t1", ("t1/a", "t1/b"), tags_any=("x",)), "streams", "streams"),
        (SearchFilter("t1", ("t1/a", "t1/b"), tags_all=("x",)), "streams", "streams"),
        (SearchFilter("t2", ("t2/a",)), "tenant", "tenant"),
        # Keys not scoped to the filter's tenant: another tenant's records could share them.
        (SearchFilter("t2", ("t1/a", "t1/b", "t2/a")), "streams", "streams"),
        (SearchFilter("t1/x", ("t1/a", "t1/b")), "streams", "streams"),
    ],
)
def test_a_filter_needs_only_what_the_streams_held_leave_open(
    flt: SearchFilter, alone: str, shared: str
) -> None:
    assert needed(flt, ALONE) == alone
    assert needed(flt, SHARED) == shared


def test_an_index_holding_nothing_needs_no_filter_of_streams_alone() -> None:
    assert needed(SearchFilter("t1", ("t1/a",)), HeldStreams()) == "none"
    assert needed(SearchFilter("t1", ("t1/a",), authors=("bo",)), HeldStreams()) == "streams"


def test_an_unscoped_key_held_or_asked_for_needs_the_whole_filter() -> None:
    held = HeldStreams.of(["t1/a", "legacy"])
    assert held == HeldStreams({"t1": frozenset({"t1/a"})}, unscoped=True)
    assert needed(SearchFilter("t1", ("t1/a",)), held) == "streams"
    assert needed(SearchFilter("t1", ("a", "b")), HeldStreams.of(["a", "b"])) == "streams"


def test_held_streams_grow_by_tenant_and_stay_the_same_object_when_nothing_is_new() -> None:
    held = HeldStreams.of(["t1/a", "t2/a", "t1/a"])
    assert held == HeldStreams({"t1": frozenset({"t1/a"}), "t2": frozenset({"t2/a"})})
    assert held.with_keys(["t1/a", "t2/a"]) is held
    grown = held.with_keys(["t1/b", "/x"])
    assert grown == HeldStreams(
        {"t1": frozenset({"t1/a", "t1/b"}), "t2": frozenset({"t2/a"})}, unscoped=True
    )
    assert held == HeldStreams({"t1": frozenset({"t1/a"}), "t2": frozenset({"t2/a"})})


def test_within_checks_every_hit_against_the_filters_streams() -> None:
    flt = SearchFilter("t1", ("t1/a", "t1/b"))
    inside = [LaneHit(RecordKey("t1/a", 1), 2.0), LaneHit(RecordKey("t1/b", 7), 1.0)]
    assert within(flt, inside) is True
    assert within(flt, []) is True
    assert within(flt, [*inside, LaneHit(RecordKey("t1/c", 1), 0.5)]) is False
