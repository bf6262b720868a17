"""Conflicting hits from different authors: found, ranked by evidence, marked, never dropped."""

from __future__ import annotations

import numpy as np

from recall_service.projections.conflicts import (
    ConflictSettings,
    conflicts_between,
    evidence_scores,
    jaccard,
    mark_conflicts,
    relate,
)
from recall_service.projections.documents import IndexedRecord, RecordKey
from recall_service.projections.hits import FusedHit


def rec(seq: int, author: str, text: str, at: float = 0.0) -> IndexedRecord:
    return IndexedRecord("t", "s", seq, author, at, text)


def key(seq: int) -> RecordKey:
    return RecordKey("s", seq)


def fused(*seqs: int) -> list[FusedHit]:
    return [FusedHit(key(s), 1.0 - i / 10, i + 1, None) for i, s in enumerate(seqs)]


MEETING_MONDAY = rec(1, "ana", "The launch meeting is on Monday at the main office", at=100.0)
MEETING_FRIDAY = rec(2, "bo", "The launch meeting is on Friday at the main office", at=200.0)
MEETING_MONDAY_AGAIN = rec(3, "cy", "The launch meeting is on Monday at the main office!", at=50.0)
LUNCH = rec(4, "bo", "I had soup for lunch", at=300.0)
ANA_UPDATE = rec(5, "ana", "The launch meeting is on Tuesday at the main office", at=400.0)


def test_jaccard_of_sets() -> None:
    assert jaccard(frozenset("ab"), frozenset("bc")) == 1 / 3
    assert jaccard(frozenset(), frozenset()) == 0.0


def test_same_subject_different_words_overlap_but_do_not_say_the_same() -> None:
    relation = relate(MEETING_MONDAY, MEETING_FRIDAY, ConflictSettings())
    # terms: {launch, meeting, monday, main, office} vs {..., friday, ...}: 4 / 6
    assert (relation.overlap, relation.same) == (True, False)


def test_a_restatement_says_the_same() -> None:
    relation = relate(MEETING_MONDAY, MEETING_MONDAY_AGAIN, ConflictSettings())
    assert (relation.overlap, relation.same) == (True, True)


def test_different_subjects_do_not_overlap() -> None:
    assert relate(MEETING_MONDAY, LUNCH, ConflictSettings()).overlap is False


def test_vector_similarity_alone_can_establish_overlap() -> None:
    a, b = rec(1, "ana", "car broke"), rec(2, "bo", "vehicle fine")
    same_direction = np.array([1.0, 0.0], dtype=np.float32)
    settings = ConflictSettings(subject_similarity=0.9)
    assert relate(a, b, settings).overlap is False
    assert relate(a, b, settings, same_direction, same_direction).overlap is True


def test_conflicts_need_different_authors_and_restatements_corroborate() -> None:
    records = [MEETING_MONDAY, MEETING_FRIDAY, MEETING_MONDAY_AGAIN, LUNCH, ANA_UPDATE]
    graph, corroborators = conflicts_between(records, ConflictSettings())
    assert graph == {
        key(1): {key(2)},  # not 5: the same author updating is no conflict
        key(2): {key(1), key(3), key(5)},
        key(3): {key(2), key(5)},
        key(4): set(),
        key(5): {key(2), key(3)},
    }
    assert corroborators == {
        key(1): {"cy"},
        key(2): set(),
        key(3): {"ana"},
        key(4): set(),
        key(5): set(),
    }


def test_evidence_adds_reliability_recency_and_corroboration() -> None:
    settings = ConflictSettings(reliability={"bo": 0.9})
    scores = evidence_scores(
        [MEETING_MONDAY, MEETING_FRIDAY], {key(1): {"cy"}, key(2): set()}, settings
    )
    # ana: 0.5 reliability + 0 recency + 1/2 corroboration; bo: 0.9 + 1 + 0.
    assert scores == {key(1): 1.0, key(2): 1.9}


def test_conflicting_hits_are_reordered_by_evidence_in_their_own_slots() -> None:
    records = {key(r.seq): r for r in (MEETING_MONDAY, LUNCH, MEETING_FRIDAY)}
    hits = fused(1, 4, 2)
    out = mark_conflicts(hits, records, ConflictSettings(weight_corroboration=0.0))
    # Friday (bo) is more recent than Monday (ana); lunch keeps its slot in the middle.
    assert [h.key.seq for h in out] == [2, 4, 1]
    assert [h.conflicts_with for h in out] == [(key(1),), (), (key(2),)]
    assert [h.score for h in out] == [hits[2].score, hits[1].score, hits[0].score]


def test_corroboration_can_outweigh_recency() -> None:
    records = {key(r.seq): r for r in (MEETING_MONDAY, MEETING_FRIDAY, MEETING_MONDAY_AGAIN)}
    settings = ConflictSettings(weight_recency=0.2, weight_corroboration=1.0)
    out = mark_conflicts(fused(2, 1, 3), records, settings)
    # ana (Monday, corroborated by cy): 0.5 + 0.2*(50/150) + 0.5 ≈ 1.067
    # cy (Monday, corroborated by ana): 0.5 + 0 + 0.5 = 1.0; bo (Friday): 0.5 + 0.2 + 0 = 0.7
    assert [h.key.seq for h in out] == [1, 3, 2]
    assert out[2].conflicts_with == (key(1), key(3))


def test_nothing_is_dropped_and_hits_outside_the_window_keep_their_place() -> None:
    records = {key(r.seq): r for r in (MEETING_MONDAY, MEETING_FRIDAY, LUNCH)}
    hits = fused(1, 2, 4, 99)  # 99 has no record: it is kept as it is
    out = mark_conflicts(hits, records, ConflictSettings(window=1))
    assert out == hits


def test_hits_without_conflicts_come_back_unchanged() -> None:
    records = {key(r.seq): r for r in (MEETING_MONDAY, LUNCH)}
    assert mark_conflicts(fused(1, 4), records) == fused(1, 4)
