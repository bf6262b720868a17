"""What a search lane returns, and what fusion returns."""

from __future__ import annotations

from typing import NamedTuple

from recall_service.projections.documents import RecordKey

# Named tuples, not dataclasses: a search makes a hundred or more of each, and a tuple is
# built in half the time of a frozen dataclass.


class LaneHit(NamedTuple):
    """One record found by one lane, with that lane's raw score (higher is better)."""

    key: RecordKey
    score: float


class FusedHit(NamedTuple):
    """One record after fusion: the fused score and its 1-based rank in each lane.

    A lane's rank is None when that lane did not return the record. `conflicts_with` lists
    the records it conflicts with (filled by `conflicts.mark_conflicts`).
    """

    key: RecordKey
    score: float
    lexical_rank: int | None
    vector_rank: int | None
    conflicts_with: tuple[RecordKey, ...] = ()
