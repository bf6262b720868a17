"""Offline: two second stages over the hybrid's ranking, measured and not adopted.

    python -m bench.rerank_experiments [--dataset ../shared/data/locomo-dev.json]

The first stage is the service's default hybrid (the context-enriched lanes of
`search_experiments`, z-score convex fusion at weight 0.9). A second stage re-orders its top
`n` by a standardised score plus a term:

- `body`: plus (1 - a) times the standardised BM25 score of the turn's body alone (no
  neighbours, no date), with the fused score weighted by `a`. The question is whether a
  ranking that keeps the context for recall and looks at the turn itself for the top ranks
  does better at Recall@1.
- `author`: plus `beta` when the question names the turn's author (the author's name is one
  of the question's words). Questions name people; a turn by the person named is the likelier
  answer — unless the question's premise names the wrong person, as category 5's do.

For each stage it prints, over categories 1-4 and category 5 separately, turn-level
Recall@1/5/10/20 of every grid point, and the cross-validated figures (leave one
conversation out, the setting chosen by mean Recall@1/5/10/20 on the other four). One JSON
object.
"""

from __future__ import annotations

import argparse
import json
import re
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from bench.locomo_data import KS, load
from bench.search_experiments import Asked, Variant, lane_runs
from recall_service.projections.embedders import WordLlamaEmbedder
from recall_service.projections.fusion import convex, normalised_scores
from recall_service.projections.hits import LaneHit

DEPTH = 50
BODY_TOPS = (3, 5, 10, 20)
BODY_WEIGHTS = tuple(round(0.1 * i, 1) for i in range(11))
AUTHOR_TOPS = (5, 20, 50)
AUTHOR_BETAS = (0.0, 0.5, 1.0, 2.0, 3.0)
Grid = dict[tuple[Any, ...], npt.NDArray[np.float64]]


def recalls(ranked: Sequence[int], evidence: Sequence[int]) -> list[float]:
    """Recall@k for each k of KS."""
    wanted = set(evidence)
    return [len(wanted & set(ranked[:k])) / len(wanted) for k in KS]


def standardised(values: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """(x - mean) / std, zeros when all are equal."""
    sd = float(values.std())
    return (values - values.mean()) / sd if sd > 0 else np.zeros_like(values)


def reorder(seqs: list[int], score: npt.NDArray[np.float64], top: int) -> list[int]:
    """`seqs` with the first `top` sorted by `score` (ties keep their order)."""
    head = sorted(range(min(top, len(seqs))), key=lambda j: (-score[j], j))
    return [seqs[j] for j in head] + seqs[top:]


def words(text: str) -> set[str]:
    """The question's lowercase words."""
    return set(re.findall(r"[a-z0-9]+", text.lower()))


def body_stage(
    fused: list[tuple[int, float]], body_hits: list[LaneHit], q: Asked
) -> dict[tuple[Any, ...], list[float]]:
    """Every (n, a) point of the body stage for one question."""
    body = normalised_scores(body_hits, "zscore")
    floor = min(body.values(), default=0.0)
    by_seq = {k.seq: v for k, v in body.items()}
    seqs = [s for s, _ in fused]
    out = {}
    for n in BODY_TOPS:
        f = standardised(np.array([v for _, v in fused[:n]]))
        b = standardised(np.array([by_seq.get(s, floor) for s in seqs[:n]]))
        for a in BODY_WEIGHTS:
            out[("body", n, a)] = recalls(reorder(seqs, a * f + (1 - a) * b, n), q.evidence_seqs)
    return out


def author_stage(
    fused: list[tuple[int, float]], authors: dict[int, str], q: Asked
) -> dict[tuple[Any, ...], list[float]]:
    """Every (n, beta) point of the author stage for one question."""
    seqs = [s for s, _ in fused]
    score = np.array([v for _, v in fused])
    named = np.array([1.0 if authors[s].lower() in words(q.text) else 0.0 for s in seqs])
    out = {}
    for n in AUTHOR_TOPS:
        for beta in AUTHOR_BETAS:
            out[("author", n, beta)] = recalls(
                reorder(seqs, score + beta * named, n), q.evidence_seqs
            )
    return out


def cross_validated(grid: Grid, folds: npt.NDArray[np.int_]) -> tuple[list[float], list[Any]]:
    """Leave-one-conversation-out: each fold scored with the point best on the others."""
    out = np.zeros((len(folds), len(KS)))
    chosen = []
    for fold in sorted(set(folds.tolist())):
        train = folds != fold
        best = max(grid, key=lambda k: float(grid[k][train].mean()))
        chosen.append(list(best))
        out[folds == fold] = grid[best][folds == fold]
    return [round(float(x), 4) for x in out.mean(axis=0)], chosen


def run(dataset: Path) -> dict[str, Any]:
    """Both stages over both question groups."""
    conversations, _ = load(dataset)
    embedder = WordLlamaEmbedder()
    result: dict[str, Any] = {}
    groups: dict[str, Callable[[int], bool]] = {
        "categories_1_4": lambda c: c in (1, 2, 3, 4),
        "category_5": lambda c: c == 5,
    }
    for group, wanted in groups.items():
        questions = []
        for ci, c in enumerate(conversations):
            seq_of = {t.dia_id: t.seq for t in c.turns}
            for item in c.questions:
                if wanted(item.category) and item.evidence:
                    seqs = tuple(seq_of[e] for e in item.evidence)
                    questions.append(Asked(ci, item.category, item.evidence, seqs, item.question))
        authors = [{t.seq: t.speaker for t in c.turns} for c in conversations]
        with tempfile.TemporaryDirectory() as tmp:
            full = lane_runs(
                conversations, questions, embedder, Variant(date=True), (3, 2), Path(tmp)
            )
            bare = lane_runs(conversations, questions, embedder, Variant(), (0, 0), Path(tmp))
        rows: dict[tuple[Any, ...], list[list[float]]] = {}
        for i, q in enumerate(questions):
            hits = convex(
                full[("lexical", 0.8)][i],
                full[("vector", 1.0)][i],
                weight=0.9,
                method="zscore",
                limit=DEPTH,
            )
            fused = [(h.key.seq, h.score) for h in hits]
            rows.setdefault(("hybrid",), []).append(recalls([s for s, _ in fused], q.evidence_seqs))
            points = {
                **body_stage(fused, bare[("lexical", 0.0)][i], q),
                **author_stage(fused, authors[q.conversation], q),
            }
            for key, value in points.items():
                rows.setdefault(key, []).append(value)
        grid = {k: np.array(v) for k, v in rows.items()}
        folds = np.array([q.conversation for q in questions])
        result[group] = {
            "questions": len(questions),
            "hybrid": [round(float(x), 4) for x in grid[("hybrid",)].mean(axis=0)],
            "grid": {
                " ".join(map(str, k)): [round(float(x), 4) for x in v.mean(axis=0)]
                for k, v in grid.items()
                if k[0] != "hybrid"
            },
        }
        if group == "categories_1_4":
            for stage in ("body", "author"):
                stage_grid = {k: v for k, v in grid.items() if k[0] == stage}
                figures, chosen = cross_validated(stage_grid, folds)
                result[group][f"{stage}_cross_validated"] = {"recall": figures, "chosen": chosen}
    return result


def main() -> None:
    """Command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="../shared/data/locomo-dev.json")
    print(json.dumps(run(Path(parser.parse_args().dataset))))


if __name__ == "__main__":
    main()
