"""Fusion of the two lanes, with exact values."""

from __future__ import annotations

import pytest

from recall_service.projections.documents import RecordKey
from recall_service.projections.fusion import (
    convex,
    lane_ranks,
    normalised_scores,
    rrf,
    single_lane,
)
from recall_service.projections.hits import FusedHit, LaneHit


def k(seq: int) -> RecordKey:
    return RecordKey("s", seq)


def hits(*pairs: tuple[int, float]) -> list[LaneHit]:
    return [LaneHit(k(seq), score) for seq, score in pairs]


LEX = hits((1, 10.0), (2, 6.0), (3, 2.0))
VEC = hits((3, 1.0), (4, 0.75), (1, 0.5))


def test_rrf_sums_reciprocal_ranks_and_keeps_each_lane_rank() -> None:
    fused = rrf(LEX, VEC, k=60)
    assert fused == [
        FusedHit(k(1), 1 / 61 + 1 / 63, 1, 3),
        FusedHit(k(3), 1 / 63 + 1 / 61, 3, 1),
        FusedHit(k(2), 1 / 62, 2, None),
        FusedHit(k(4), 1 / 62, None, 2),
    ]


def test_rrf_ties_break_by_best_lane_rank_then_seq() -> None:
    # 1 and 3 tie on score and on best rank (1); 2 and 4 tie on both: seq decides.
    assert [h.key.seq for h in rrf(LEX, VEC, k=60)] == [1, 3, 2, 4]


def test_rrf_weights_scale_each_lane() -> None:
    fused = rrf(LEX, VEC, k=0, weights=(2.0, 0.0))
    assert [(h.key.seq, h.score) for h in fused] == [(1, 2.0), (2, 1.0), (3, 2 / 3), (4, 0.0)]


def test_rrf_rejects_a_negative_k() -> None:
    with pytest.raises(ValueError, match="k must be >= 0, got -1"):
        rrf(LEX, VEC, k=-1)


def test_minmax_normalisation_maps_best_to_one_and_worst_to_zero() -> None:
    assert normalised_scores(LEX, "minmax") == {k(1): 1.0, k(2): 0.5, k(3): 0.0}


def test_minmax_of_equal_scores_is_one() -> None:
    assert normalised_scores(hits((1, 3.0), (2, 3.0)), "minmax") == {k(1): 1.0, k(2): 1.0}


def test_zscore_normalisation_is_distance_from_the_mean_in_deviations() -> None:
    scores = normalised_scores(hits((1, 3.0), (2, 1.0)), "zscore")
    assert scores == {k(1): 1.0, k(2): -1.0}


def test_convex_minmax_combines_normalised_scores_with_the_weight() -> None:
    fused = convex(LEX, VEC, weight=0.5, method="minmax")
    # lex: 1->1.0, 2->0.5, 3->0.0; vec: 3->1.0, 4->0.5, 1->0.0; absent -> 0.
    assert [(h.key.seq, h.score, h.lexical_rank, h.vector_rank) for h in fused] == [
        (1, 0.5, 1, 3),
        (3, 0.5, 3, 1),
        (2, 0.25, 2, None),
        (4, 0.25, None, 2),
    ]


def test_convex_weight_one_is_the_lexical_order() -> None:
    assert [h.key.seq for h in convex(LEX, VEC, weight=1.0)] == [1, 2, 3, 4]


def test_convex_weight_zero_is_the_vector_order() -> None:
    assert [h.key.seq for h in convex(LEX, VEC, weight=0.0)] == [3, 4, 1, 2]


def test_convex_zscore_gives_absent_records_the_lane_floor() -> None:
    lex = hits((1, 3.0), (2, 1.0))  # z: +1, -1
    vec = hits((3, 2.0), (1, 0.0))  # z: +1, -1
    fused = convex(lex, vec, weight=0.5, method="zscore")
    assert [(h.key.seq, h.score) for h in fused] == [(1, 0.0), (3, 0.0), (2, -1.0)]


def test_convex_limit_keeps_the_best() -> None:
    assert [h.key.seq for h in convex(LEX, VEC, weight=0.5, limit=2)] == [1, 3]


def test_convex_rejects_a_weight_outside_zero_one() -> None:
    with pytest.raises(ValueError, match=r"weight must be within \[0, 1\], got 1.5"):
        convex(LEX, VEC, weight=1.5)


def test_fusion_of_empty_lanes_is_empty() -> None:
    assert rrf([], []) == []
    assert convex([], [], method="zscore") == []


def test_one_empty_lane_keeps_the_other_lanes_order() -> None:
    assert [h.key.seq for h in convex(LEX, [], weight=0.3)] == [1, 2, 3]
    assert [h.vector_rank for h in convex([], VEC, weight=0.3)] == [1, 2, 3]


def test_a_duplicate_hit_counts_once_at_its_first_rank() -> None:
    assert lane_ranks(hits((1, 3.0), (2, 2.0), (1, 1.0))) == {k(1): 1, k(2): 2}


def test_single_lane_keeps_scores_and_sets_only_that_lanes_rank() -> None:
    assert single_lane(VEC, "vector") == [
        FusedHit(k(3), 1.0, None, 1),
        FusedHit(k(4), 0.75, None, 2),
        FusedHit(k(1), 0.5, None, 3),
    ]
    assert [h.lexical_rank for h in single_lane(LEX, "lexical")] == [1, 2, 3]
