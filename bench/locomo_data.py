"""LoCoMo-format data and turn-level retrieval metrics.

    conversations, dropped = load(Path("../shared/data/locomo-dev.json"))

A conversation's turns are numbered 1..N in dialogue order (they become a stream's seqs). Each
question keeps only the evidence ids that are well formed (`D<session>:<turn>`) and name a
turn of its conversation; the others are returned as dropped, to be reported. The metric
functions are pure: they take the ranked turn ids a search returned and the evidence ids.
"""

from __future__ import annotations

import calendar
import json
import re
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

EVIDENCE_ID = re.compile(r"^D(\d+):(\d+)$")
SESSION_KEY = re.compile(r"^session_(\d+)$")
KS = (1, 5, 10, 20)
ANSWERABLE = (1, 2, 3, 4)
ADVERSARIAL = 5


@dataclass(frozen=True, slots=True)
class Turn:
    """One dialogue turn. `created_at` is the session's time plus the turn's index in seconds,
    so that time order and dialogue order agree."""

    dia_id: str
    seq: int
    session: int
    speaker: str
    text: str
    caption: str | None
    created_at: float


@dataclass(frozen=True, slots=True)
class Question:
    """A question with its valid evidence turn ids."""

    question: str
    category: int
    evidence: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Conversation:
    """One conversation: its turns in order and its questions."""

    sample_id: str
    turns: tuple[Turn, ...]
    questions: tuple[Question, ...]


@dataclass(frozen=True, slots=True)
class DroppedEvidence:
    """An evidence id that was malformed or named no turn."""

    sample_id: str
    evidence_id: str
    reason: str


def parse_session_time(text: str) -> float:
    """Epoch seconds (read as UTC) of a LoCoMo session time such as `1:56 pm on 8 May, 2023`."""
    return float(calendar.timegm(time.strptime(text.strip(), "%I:%M %p on %d %B, %Y")))


def turn_content(turn: Turn, with_caption: bool = True) -> str:
    """What a client would write for a turn: its text, and the shared image's caption."""
    if with_caption and turn.caption:
        return f"{turn.text} [shares an image: {turn.caption}]"
    return turn.text


def _turns(conversation: dict[str, Any]) -> list[Turn]:
    sessions = sorted(int(m.group(1)) for key in conversation if (m := SESSION_KEY.match(key)))
    turns: list[Turn] = []
    for session in sessions:
        start = parse_session_time(conversation[f"session_{session}_date_time"])
        for index, raw in enumerate(conversation[f"session_{session}"]):
            turns.append(
                Turn(
                    dia_id=str(raw["dia_id"]),
                    seq=len(turns) + 1,
                    session=session,
                    speaker=str(raw["speaker"]),
                    text=str(raw["text"]),
                    caption=raw.get("blip_caption"),
                    created_at=start + index,
                )
            )
    return turns


def parse(items: Sequence[dict[str, Any]]) -> tuple[list[Conversation], list[DroppedEvidence]]:
    """Conversations from LoCoMo-format items, and the evidence ids dropped from them."""
    conversations: list[Conversation] = []
    dropped: list[DroppedEvidence] = []
    for item in items:
        sample_id = str(item["sample_id"])
        turns = _turns(item["conversation"])
        known = {t.dia_id for t in turns}
        questions = []
        for qa in item["qa"]:
            evidence = []
            for raw in qa.get("evidence", []):
                eid = str(raw)
                if not EVIDENCE_ID.match(eid):
                    dropped.append(DroppedEvidence(sample_id, eid, "malformed"))
                elif eid not in known:
                    dropped.append(DroppedEvidence(sample_id, eid, "names no turn"))
                elif eid not in evidence:
                    evidence.append(eid)
            questions.append(Question(str(qa["question"]), int(qa["category"]), tuple(evidence)))
        conversations.append(Conversation(sample_id, tuple(turns), tuple(questions)))
    return conversations, dropped


def load(path: Path) -> tuple[list[Conversation], list[DroppedEvidence]]:
    """`parse` of a LoCoMo-format JSON file."""
    return parse(json.loads(path.read_text()))


# -- metrics ------------------------------------------------------------------------------


def recall_at(ranked: Sequence[str], evidence: Iterable[str], k: int) -> float:
    """Share of the evidence turns found among the first `k` ranked turns."""
    wanted = set(evidence)
    if not wanted:
        raise ValueError("recall is undefined without evidence")
    return len(wanted & set(ranked[:k])) / len(wanted)


def hit_at(ranked: Sequence[str], evidence: Iterable[str], k: int) -> float:
    """1.0 when any evidence turn is among the first `k` ranked turns, else 0.0."""
    return 1.0 if set(evidence) & set(ranked[:k]) else 0.0


def reciprocal_rank(ranked: Sequence[str], evidence: Iterable[str]) -> float:
    """1 / the rank of the first evidence turn found; 0.0 when none is found."""
    wanted = set(evidence)
    for rank, turn in enumerate(ranked, start=1):
        if turn in wanted:
            return 1.0 / rank
    return 0.0


@dataclass(frozen=True, slots=True)
class Outcome:
    """A question's category, its evidence and what a search ranked for it."""

    category: int
    evidence: tuple[str, ...]
    ranked: tuple[str, ...]


def summarise(outcomes: Sequence[Outcome], ks: Sequence[int] = KS) -> dict[str, float | int]:
    """Mean recall@k for each k, hit@10 and MRR over outcomes that have evidence.

    Questions without valid evidence are left out and counted as `no_evidence`.
    """
    scored = [o for o in outcomes if o.evidence]
    out: dict[str, float | int] = {}
    n = len(scored)
    for k in ks:
        out[f"recall@{k}"] = (
            round(sum(recall_at(o.ranked, o.evidence, k) for o in scored) / n, 4) if n else 0.0
        )
    out["hit@10"] = (
        round(sum(hit_at(o.ranked, o.evidence, 10) for o in scored) / n, 4) if n else 0.0
    )
    out["mrr"] = (
        round(sum(reciprocal_rank(o.ranked, o.evidence) for o in scored) / n, 4) if n else 0.0
    )
    out["questions"] = n
    out["no_evidence"] = len(outcomes) - n
    return out


def by_category_group(outcomes: Sequence[Outcome]) -> dict[str, dict[str, float | int]]:
    """`summarise` for categories 1-4 and for category 5, under the harness's keys."""
    return {
        "categories_1_4": summarise([o for o in outcomes if o.category in ANSWERABLE]),
        "category_5": summarise([o for o in outcomes if o.category == ADVERSARIAL]),
    }
