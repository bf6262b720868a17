"""When a filter admits every record an index holds (`implied`), and the check of the hits a
search without it returned (`within`)."""

from __future__ import annotations

import pytest

from recall_service.projections.documents import RecordKey
from recall_service.projections.filters import SearchFilter, implied, within
from recall_service.projections.hits import LaneHit

HELD = frozenset({"t1/a", "t1/b"})


@pytest.mark.parametrize(
    ("flt", "expected"),
    [
        (SearchFilter("t1", ("t1/a", "t1/b")), True),
        (SearchFilter("t1", ("t1/b", "t1/a", "t1/never-written")), True),
        (SearchFilter("t1", ("t1/a",)), False),  # t1/b's records would pass
        (SearchFilter("t1", ("t1/a", "t1/c")), False),
        (SearchFilter("t1", ("t1/a", "t1/b"), authors=("ana",)), False),
        (SearchFilter("t1", ("t1/a", "t1/b"), start=0.0), False),
        (SearchFilter("t1", ("t1/a", "t1/b"), end=10.0), False),
        (SearchFilter("t1", ("t1/a", "t1/b"), tags_any=("x",)), False),
        (SearchFilter("t1", ("t1/a", "t1/b"), tags_all=("x",)), False),
        # Keys not scoped to the filter's tenant: another tenant's records could share them.
        (SearchFilter("t2", ("t1/a", "t1/b")), False),
        (SearchFilter("t1/x", ("t1/a", "t1/b")), False),
    ],
)
def test_a_filter_is_implied_only_by_its_streams_naming_every_one_held(
    flt: SearchFilter, expected: bool
) -> None:
    assert implied(flt, HELD) is expected


def test_an_index_holding_nothing_implies_any_filter_of_streams_alone() -> None:
    assert implied(SearchFilter("t1", ("t1/a",)), frozenset()) is True
    assert implied(SearchFilter("t1", ("t1/a",), authors=("bo",)), frozenset()) is False


def test_unscoped_keys_never_imply_the_filter() -> None:
    assert implied(SearchFilter("t1", ("a", "b")), frozenset({"a", "b"})) is False


def test_within_checks_every_hit_against_the_filters_streams() -> None:
    flt = SearchFilter("t1", ("t1/a", "t1/b"))
    inside = [LaneHit(RecordKey("t1/a", 1), 2.0), LaneHit(RecordKey("t1/b", 7), 1.0)]
    assert within(flt, inside) is True
    assert within(flt, []) is True
    assert within(flt, [*inside, LaneHit(RecordKey("t1/c", 1), 0.5)]) is False
