"""LoCoMo-format loading and the turn-level metrics."""

from __future__ import annotations

import pytest

from bench.locomo_data import (
    DroppedEvidence,
    Outcome,
    by_category_group,
    hit_at,
    parse,
    parse_session_time,
    recall_at,
    reciprocal_rank,
    summarise,
    turn_content,
)

ITEM = {
    "sample_id": "conv-x",
    "conversation": {
        "speaker_a": "Ana",
        "speaker_b": "Bo",
        "session_2_date_time": "9:00 am on 2 May, 2023",
        "session_2": [{"speaker": "Ana", "dia_id": "D2:1", "text": "later"}],
        "session_1_date_time": "1:56 pm on 8 May, 2023",
        "session_1": [
            {"speaker": "Ana", "dia_id": "D1:1", "text": "hi"},
            {"speaker": "Bo", "dia_id": "D1:2", "text": "look", "blip_caption": "a red bike"},
        ],
    },
    "qa": [
        {"question": "q1", "answer": "a", "evidence": ["D1:2", "D1:2", "D2:1"], "category": 1},
        {"question": "q2", "evidence": ["D1:9", "D1:1; D2:1", "D:1:1"], "category": 5},
    ],
}


def test_session_time_is_read_as_utc() -> None:
    assert parse_session_time("1:56 pm on 8 May, 2023") == 1683554160.0
    assert parse_session_time("12:09 am on 13 September, 2023") == 1694563740.0


def test_turns_are_numbered_in_session_order_with_time_by_index() -> None:
    conversations, _ = parse([ITEM])
    turns = conversations[0].turns
    assert [(t.dia_id, t.seq, t.session) for t in turns] == [
        ("D1:1", 1, 1),
        ("D1:2", 2, 1),
        ("D2:1", 3, 2),
    ]
    assert [t.created_at for t in turns] == [1683554160.0, 1683554161.0, 1683018000.0]


def test_a_caption_is_written_with_the_turn_only_when_asked() -> None:
    turn = parse([ITEM])[0][0].turns[1]
    assert turn_content(turn) == "look [shares an image: a red bike]"
    assert turn_content(turn, with_caption=False) == "look"


def test_evidence_is_deduplicated_and_bad_ids_are_dropped_and_counted() -> None:
    conversations, dropped = parse([ITEM])
    assert [q.evidence for q in conversations[0].questions] == [("D1:2", "D2:1"), ()]
    assert dropped == [
        DroppedEvidence("conv-x", "D1:9", "names no turn"),
        DroppedEvidence("conv-x", "D1:1; D2:1", "malformed"),
        DroppedEvidence("conv-x", "D:1:1", "malformed"),
    ]


RANKED = ("D1:1", "D1:5", "D1:2", "D1:3")


def test_recall_at_k_is_the_share_of_evidence_in_the_top_k() -> None:
    assert recall_at(RANKED, ["D1:2", "D1:3", "D9:9"], 1) == 0.0
    assert recall_at(RANKED, ["D1:2", "D1:3", "D9:9"], 3) == 1 / 3
    assert recall_at(RANKED, ["D1:2", "D1:3", "D9:9"], 20) == 2 / 3


def test_recall_without_evidence_is_an_error() -> None:
    with pytest.raises(ValueError, match="undefined without evidence"):
        recall_at(RANKED, [], 5)


def test_hit_at_k_and_reciprocal_rank() -> None:
    assert hit_at(RANKED, ["D1:3"], 3) == 0.0
    assert hit_at(RANKED, ["D1:3"], 4) == 1.0
    assert reciprocal_rank(RANKED, ["D1:3", "D1:2"]) == 1 / 3
    assert reciprocal_rank(RANKED, ["D7:7"]) == 0.0


def test_summary_averages_over_questions_with_evidence() -> None:
    outcomes = [
        Outcome(1, ("a",), ("a", "b")),
        Outcome(2, ("b", "c"), ("a", "b")),
        Outcome(3, (), ("a",)),
    ]
    assert summarise(outcomes) == {
        "recall@1": 0.5,
        "recall@5": 0.75,
        "recall@10": 0.75,
        "recall@20": 0.75,
        "hit@10": 1.0,
        "mrr": 0.75,
        "questions": 2,
        "no_evidence": 1,
    }


def test_categories_one_to_four_and_five_are_reported_apart() -> None:
    groups = by_category_group([Outcome(4, ("a",), ("a",)), Outcome(5, ("a",), ("b",))])
    assert groups["categories_1_4"]["recall@1"] == 1.0
    assert groups["category_5"]["recall@1"] == 0.0
    assert (groups["categories_1_4"]["questions"], groups["category_5"]["questions"]) == (1, 1)
