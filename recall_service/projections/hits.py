"""What a search lane returns, and what fusion returns."""

from __future__ import annotations

from dataclasses import dataclass

from recall_service.projections.documents import RecordKey


@dataclass(frozen=True, slots=True)
class LaneHit:
    """One record found by one lane, with that lane's raw score (higher is better)."""

    key: RecordKey
    score: float


@dataclass(frozen=True, slots=True)
class FusedHit:
    """One record after fusion: the fused score and its 1-based rank in each lane.

    A lane's rank is None when that lane did not return the record. `conflicts_with` lists
    the records it conflicts with (filled by `conflicts.mark_conflicts`).
    """

    key: RecordKey
    score: float
    lexical_rank: int | None
    vector_rank: int | None
    conflicts_with: tuple[RecordKey, ...] = ()
