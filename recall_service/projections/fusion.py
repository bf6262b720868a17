"""Fusing the lexical and the vector lane: pure functions over ranked lane hits.

Each lane's hits arrive best first. Every fused hit keeps its 1-based rank in each lane (None
when the lane did not return it). Ties in the fused score are broken by the better lane rank,
then by (stream, seq), so the order is deterministic. `limit` keeps only the best hits.

- `rrf`: reciprocal rank fusion, `sum(w / (k + rank))` over the lanes that returned a record.
  It ignores how far apart the scores are, which is why it loses to the better lane when one
  lane is much stronger (DESIGN.md §4.3).
- `convex`: `w * s_lex + (1 - w) * s_vec` with each lane's scores normalised over its own
  result list, by min-max (`"minmax"`: best 1, worst 0) or by z-score (`"zscore"`: distance
  from the list's mean in standard deviations). A record a lane did not return gets that
  lane's floor (0 for min-max; the lowest z-score in that list for z-score).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

from recall_service.projections.documents import RecordKey
from recall_service.projections.hits import FusedHit, LaneHit

Normalisation = Literal["minmax", "zscore"]


def lane_ranks(hits: Sequence[LaneHit]) -> dict[RecordKey, int]:
    """1-based rank of each record in one lane (its first occurrence wins)."""
    ranks: dict[RecordKey, int] = {}
    for i, hit in enumerate(hits, start=1):
        ranks.setdefault(hit.key, i)
    return ranks


def _ordered(
    scores: dict[RecordKey, float],
    lexical: dict[RecordKey, int],
    vector: dict[RecordKey, int],
    limit: int | None,
) -> list[FusedHit]:
    absent = 1 << 62
    order = sorted(
        (
            -score,
            min(lexical.get(key, absent), vector.get(key, absent)),
            key.stream_id,
            key.seq,
            key,
        )
        for key, score in scores.items()
    )
    return [
        FusedHit(key, -neg, lexical.get(key), vector.get(key))
        for neg, _, _, _, key in order[:limit]
    ]


def rrf(
    lexical: Sequence[LaneHit],
    vector: Sequence[LaneHit],
    k: float = 60.0,
    weights: tuple[float, float] = (1.0, 1.0),
    limit: int | None = None,
) -> list[FusedHit]:
    """Reciprocal rank fusion of the two lanes."""
    if k < 0:
        raise ValueError(f"k must be >= 0, got {k}")
    lex, vec = lane_ranks(lexical), lane_ranks(vector)
    scores: dict[RecordKey, float] = {}
    for ranks, weight in ((lex, weights[0]), (vec, weights[1])):
        for key, rank in ranks.items():
            scores[key] = scores.get(key, 0.0) + weight / (k + rank)
    return _ordered(scores, lex, vec, limit)


def normalised_scores(hits: Sequence[LaneHit], method: Normalisation) -> dict[RecordKey, float]:
    """One lane's scores mapped onto a common scale (see the module docstring)."""
    raw: dict[RecordKey, float] = {}
    for hit in hits:
        raw.setdefault(hit.key, hit.score)
    if not raw:
        return {}
    values = list(raw.values())
    if method == "minmax":
        low, high = min(values), max(values)
        span = high - low
        return {key: (v - low) / span if span > 0 else 1.0 for key, v in raw.items()}
    mean = sum(values) / len(values)
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))
    return {key: (v - mean) / std if std > 0 else 0.0 for key, v in raw.items()}


def convex(
    lexical: Sequence[LaneHit],
    vector: Sequence[LaneHit],
    weight: float = 0.9,
    method: Normalisation = "zscore",
    limit: int | None = None,
) -> list[FusedHit]:
    """Convex combination `weight * lexical + (1 - weight) * vector` of normalised scores.

    The defaults (z-score, 0.9) are the best setting on LoCoMo's dev set (docs/search.md).
    """
    if not 0.0 <= weight <= 1.0:
        raise ValueError(f"weight must be within [0, 1], got {weight}")
    lex_scores = normalised_scores(lexical, method)
    vec_scores = normalised_scores(vector, method)
    lex_floor = min(lex_scores.values(), default=0.0) if method == "zscore" else 0.0
    vec_floor = min(vec_scores.values(), default=0.0) if method == "zscore" else 0.0
    scores = {
        key: weight * lex_scores.get(key, lex_floor)
        + (1.0 - weight) * vec_scores.get(key, vec_floor)
        for key in (*lex_scores, *vec_scores)
    }
    return _ordered(scores, lane_ranks(lexical), lane_ranks(vector), limit)


def single_lane(hits: Sequence[LaneHit], lane: Literal["lexical", "vector"]) -> list[FusedHit]:
    """One lane's hits as fused hits (for LEXICAL and VECTOR search modes)."""
    out: list[FusedHit] = []
    seen: set[RecordKey] = set()
    for hit in hits:
        if hit.key in seen:
            continue
        seen.add(hit.key)
        rank = len(out) + 1
        out.append(
            FusedHit(
                key=hit.key,
                score=hit.score,
                lexical_rank=rank if lane == "lexical" else None,
                vector_rank=rank if lane == "vector" else None,
            )
        )
    return out
