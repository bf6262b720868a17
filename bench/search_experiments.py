"""Offline search experiments on LoCoMo-format data, over the projection modules directly.

    python -m bench.search_experiments [--dataset ../shared/data/locomo-dev.json]
        [--embedder wordllama|minilm --minilm-path DIR]

Each conversation becomes one stream of a Tantivy index and a Qdrant Edge index; every
question searches its own conversation's stream. Lane settings form a small grid: which
neighbouring turns join a turn's context (before, after), how much a context match counts
lexically (`context_boost`) and in the turn's vector (`context_weight`), and the fusion
weight. For each method family — BM25 alone, dense alone, RRF (k=60), min-max convex fusion,
z-score convex fusion — the runner reports, on categories 1-4:

- `in_sample`: the grid setting that scores best over all five conversations (optimistic);
- `cross_validated`: leave-one-conversation-out — each conversation is scored with the
  setting that is best on the other four; the held-out outcomes are pooled.

A setting's score is the mean turn-level Recall@1/5/10/20. The grid is scored with a
vectorised equivalent of `fusion.convex`; every reported figure is recomputed with the real
`recall_service.projections.fusion` functions. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from bench.locomo_data import (
    ANSWERABLE,
    KS,
    Conversation,
    Outcome,
    load,
    summarise,
    turn_content,
)
from recall_service.projections.documents import IndexedRecord, TextSettings, indexed_texts
from recall_service.projections.embedders import (
    Embedder,
    SumPooling,
    Vectors,
    WordLlamaEmbedder,
    embed_indexed,
    normalise_rows,
)
from recall_service.projections.filters import SearchFilter
from recall_service.projections.fusion import convex, normalised_scores, rrf, single_lane
from recall_service.projections.hits import FusedHit, LaneHit
from recall_service.projections.lexical import LexicalIndex, LexicalSettings
from recall_service.projections.vectors import QdrantEdgeIndex

TENANT = "bench"
WINDOWS = ((0, 0), (1, 0), (2, 0), (3, 0), (1, 1), (2, 1), (3, 1), (2, 2), (3, 2))
CONTEXT_BOOSTS = (0.3, 0.5, 0.8)
CONTEXT_WEIGHTS = (0.0, 0.5, 1.0)
FUSION_WEIGHTS = tuple(round(0.1 * i, 1) for i in range(11))
FAMILIES = ("bm25", "dense", "rrf", "convex_minmax", "convex_zscore")
DEPTH = 50
TOP = 20


@dataclass(frozen=True, slots=True)
class Variant:
    """How turns are written and indexed: the parts of the indexed text being ablated."""

    author: bool = True
    caption: bool = True
    date: bool = False
    stopwords: bool = True


@dataclass(frozen=True, slots=True)
class Asked:
    """One question, the conversation it belongs to, and its evidence seqs and ids."""

    conversation: int
    category: int
    evidence: tuple[str, ...]
    evidence_seqs: tuple[int, ...]
    text: str


@dataclass(frozen=True, slots=True)
class Setting:
    """One point of the grid."""

    variant: str
    before: int
    after: int
    context_boost: float
    context_weight: float
    family: str
    weight: float

    def describe(self) -> dict[str, Any]:
        """The setting as JSON-ready fields."""
        return {
            "variant": self.variant,
            "neighbours_before": self.before,
            "neighbours_after": self.after,
            "context_boost": self.context_boost,
            "context_weight": self.context_weight,
            "family": self.family,
            "fusion_weight": self.weight,
        }


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 through sentence-transformers (measurement only; needs PyTorch)."""

    def __init__(self, path: str) -> None:
        from sentence_transformers import SentenceTransformer  # type: ignore[import-not-found]

        self._model: Any = SentenceTransformer(path, device="cpu")

    @property
    def name(self) -> str:
        """The model's name."""
        return "all-MiniLM-L6-v2"

    @property
    def dim(self) -> int:
        """384."""
        return 384

    def embed(self, texts: Sequence[str]) -> Vectors:
        """Unit-length embeddings."""
        return normalise_rows(self._model.encode(list(texts), batch_size=64))


def records_of(conversation: Conversation, variant: Variant) -> list[IndexedRecord]:
    """A conversation's turns as the records of one stream."""
    return [
        IndexedRecord(
            tenant=TENANT,
            stream_id=conversation.sample_id,
            seq=t.seq,
            author=t.speaker,
            created_at=t.created_at,
            text=turn_content(t, with_caption=variant.caption),
        )
        for t in conversation.turns
    ]


Runs = dict[tuple[str, float], list[list[LaneHit]]]


def lane_runs(
    conversations: Sequence[Conversation],
    questions: Sequence[Asked],
    embedder: Embedder,
    variant: Variant,
    window: tuple[int, int],
    workdir: Path,
) -> Runs:
    """Every question's lexical hits (per context boost) and vector hits (per context weight)."""
    settings = TextSettings(
        with_author=variant.author,
        with_date=variant.date,
        neighbours_before=window[0],
        neighbours_after=window[1],
    )
    records = [r for c in conversations for r in records_of(c, variant)]
    texts = indexed_texts(records, settings)
    has_context = any(t.context for t in texts)
    filters = [SearchFilter(TENANT, (conversations[q.conversation].sample_id,)) for q in questions]
    runs: Runs = {}
    lexical_settings = LexicalSettings() if variant.stopwords else LexicalSettings(stopwords=())
    for boost in CONTEXT_BOOSTS if has_context else (0.0,):
        lexical = LexicalIndex(
            None,
            LexicalSettings(stopwords=lexical_settings.stopwords, context_boost=boost),
        )
        lexical.apply(records, texts, {})
        runs[("lexical", boost)] = [
            lexical.search(q.text, DEPTH, f) for q, f in zip(questions, filters, strict=True)
        ]
        lexical.close()
    query_vectors = embedder.embed([q.text for q in questions])
    if not isinstance(embedder, SumPooling):  # embed bodies and contexts once for all weights
        bodies = embedder.embed([t.body for t in texts])
        contexts = embedder.embed([t.context for t in texts]) if has_context else bodies
    for weight in CONTEXT_WEIGHTS if has_context else (0.0,):
        if isinstance(embedder, SumPooling):
            vectors = embed_indexed(embedder, texts, weight)  # what the indexer stores
        else:
            vectors = normalise_rows(bodies + weight * contexts) if weight else bodies
        index = QdrantEdgeIndex(Path(tempfile.mkdtemp(dir=workdir)), embedder.dim)
        index.upsert(records, vectors, {})
        runs[("vector", weight)] = [
            index.search(v, DEPTH, f) for v, f in zip(query_vectors, filters, strict=True)
        ]
        index.close()
    return runs


def fuse(setting: Setting, lexical: list[LaneHit], vector: list[LaneHit]) -> list[FusedHit]:
    """The real fusion function of a setting's family."""
    if setting.family == "bm25":
        return single_lane(lexical, "lexical")[:TOP]
    if setting.family == "dense":
        return single_lane(vector, "vector")[:TOP]
    if setting.family == "rrf":
        return rrf(lexical, vector, k=60.0, limit=TOP)
    method: Any = "minmax" if setting.family == "convex_minmax" else "zscore"
    return convex(lexical, vector, weight=setting.weight, method=method, limit=TOP)


def fast_scores(
    lexical: list[LaneHit], vector: list[LaneHit], asked: Asked, family: str
) -> npt.NDArray[np.float64]:
    """Per fusion weight, the question's mean Recall@1/5/10/20 (vectorised grid scoring)."""
    weights = np.array(FUSION_WEIGHTS if family.startswith("convex") else (0.0,))
    keys = list(dict.fromkeys([h.key for h in lexical] + [h.key for h in vector]))
    if not keys:
        return np.zeros(len(weights))
    lex_rank = {h.key: i for i, h in reversed(list(enumerate(lexical, 1)))}
    vec_rank = {h.key: i for i, h in reversed(list(enumerate(vector, 1)))}
    absent = 1 << 30
    best = np.array([min(lex_rank.get(k, absent), vec_rank.get(k, absent)) for k in keys])
    seqs = np.array([k.seq for k in keys])
    if family == "bm25":
        score = np.array([-lex_rank.get(k, absent) for k in keys], dtype=float)[None, :]
    elif family == "dense":
        score = np.array([-vec_rank.get(k, absent) for k in keys], dtype=float)[None, :]
    elif family == "rrf":
        score = np.array(
            [
                (1 / (60 + lex_rank[k]) if k in lex_rank else 0.0)
                + (1 / (60 + vec_rank[k]) if k in vec_rank else 0.0)
                for k in keys
            ]
        )[None, :]
    else:
        method: Any = "minmax" if family == "convex_minmax" else "zscore"
        ln, vn = normalised_scores(lexical, method), normalised_scores(vector, method)
        lf = min(ln.values(), default=0.0) if method == "zscore" else 0.0
        vf = min(vn.values(), default=0.0) if method == "zscore" else 0.0
        lv = np.array([ln.get(k, lf) for k in keys])
        vv = np.array([vn.get(k, vf) for k in keys])
        score = weights[:, None] * lv[None, :] + (1.0 - weights)[:, None] * vv[None, :]
    index = {k.seq: i for i, k in enumerate(keys)}
    result = np.zeros(score.shape[0])
    for seq in asked.evidence_seqs:
        if seq not in index:
            continue
        i = index[seq]
        ahead = (score > score[:, i : i + 1]) | (
            (score == score[:, i : i + 1])
            & ((best < best[i]) | ((best == best[i]) & (seqs < seqs[i])))
        )[...]
        rank = ahead.sum(axis=1) + 1
        for k in KS:
            result += (rank <= k) / len(KS)
    return result / len(asked.evidence_seqs)


def objective(outcome: Outcome) -> float:
    """The selection score of one reported outcome: mean Recall@1/5/10/20."""
    wanted = set(outcome.evidence)
    return sum(len(wanted & set(outcome.ranked[:k])) / len(wanted) for k in KS) / len(KS)


def run(args: argparse.Namespace) -> dict[str, Any]:
    """All experiments; the result is printed as one JSON object."""
    conversations, dropped = load(Path(args.dataset))
    questions = []
    for ci, c in enumerate(conversations):
        seq_of = {t.dia_id: t.seq for t in c.turns}
        for q in c.questions:
            if q.category in ANSWERABLE and q.evidence:
                seqs = tuple(seq_of[e] for e in q.evidence)
                questions.append(Asked(ci, q.category, q.evidence, seqs, q.question))
    embedder: Embedder = (
        MiniLMEmbedder(args.minilm_path) if args.embedder == "minilm" else WordLlamaEmbedder()
    )
    started = time.perf_counter()
    variants = {
        "plain": (Variant(author=False, caption=False, stopwords=False), ((0, 0),)),
        "author": (Variant(author=True, caption=False), ((0, 0),)),
        "author_caption": (Variant(author=True, caption=True), WINDOWS),
        "author_caption_date": (Variant(author=True, caption=True, date=True), WINDOWS),
    }
    grid: dict[Setting, npt.NDArray[np.float64]] = {}  # setting -> per-question score
    all_runs: dict[tuple[str, tuple[int, int]], Runs] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for vname, (variant, windows) in variants.items():
            for window in windows:
                runs = lane_runs(conversations, questions, embedder, variant, window, Path(tmp))
                all_runs[(vname, window)] = runs
                lex_keys = [k for k in runs if k[0] == "lexical"]
                vec_keys = [k for k in runs if k[0] == "vector"]
                for family in FAMILIES:
                    for lk in lex_keys if family != "dense" else lex_keys[:1]:
                        for vk in vec_keys if family != "bm25" else vec_keys[:1]:
                            per_q = np.array(
                                [
                                    fast_scores(lex, vec, q, family)
                                    for lex, vec, q in zip(
                                        runs[lk], runs[vk], questions, strict=True
                                    )
                                ]
                            )
                            weights = FUSION_WEIGHTS if family.startswith("convex") else (0.0,)
                            for wi, w in enumerate(weights):
                                setting = Setting(vname, *window, lk[1], vk[1], family, w)
                                grid[setting] = per_q[:, wi]
    fold_of = np.array([q.conversation for q in questions])

    def outcomes(setting: Setting, mask: npt.NDArray[np.bool_] | None = None) -> list[Outcome]:
        runs = all_runs[(setting.variant, (setting.before, setting.after))]
        lex_key = ("lexical", setting.context_boost)
        vec_key = ("vector", setting.context_weight)
        turn_id = [{t.seq: t.dia_id for t in c.turns} for c in conversations]
        out = []
        for i, q in enumerate(questions):
            if mask is not None and not mask[i]:
                continue
            fused = fuse(setting, runs[lex_key][i], runs[vec_key][i])
            ranked = tuple(turn_id[q.conversation][h.key.seq] for h in fused)
            out.append(Outcome(q.category, q.evidence, ranked))
        return out

    def best(settings: list[Setting], mask: npt.NDArray[np.bool_]) -> Setting:
        return max(settings, key=lambda s: (float(grid[s][mask].sum()), json.dumps(s.describe())))

    def report(settings: list[Setting]) -> dict[str, Any]:
        everyone = np.ones(len(questions), dtype=bool)
        chosen = best(settings, everyone)
        in_sample = outcomes(chosen)
        pooled: list[Outcome] = []
        cv_settings = []
        for fold in range(len(conversations)):
            pick = best(settings, fold_of != fold)
            cv_settings.append(pick.describe())
            pooled.extend(outcomes(pick, fold_of == fold))
        fast = float(grid[chosen].mean())
        real = sum(objective(o) for o in in_sample) / len(in_sample)
        return {
            "in_sample": summarise(in_sample),
            "in_sample_setting": chosen.describe(),
            "cross_validated": summarise(pooled),
            "cv_settings": cv_settings,
            "grid_score_matches_real_fusion": abs(fast - real) < 1e-3,
        }

    def family_report(variant: str | None, family: str) -> dict[str, Any]:
        pool = [s for s in grid if s.family == family and (variant is None or s.variant == variant)]
        return report(pool)

    hybrid = [s for s in grid if s.family in ("rrf", "convex_minmax", "convex_zscore")]
    return {
        "dataset": args.dataset,
        "embedder": embedder.name,
        "questions_categories_1_4": len(questions),
        "dropped_evidence_ids": len(dropped),
        "lane_depth": DEPTH,
        "by_variant": {v: {f: family_report(v, f) for f in FAMILIES} for v in variants},
        "tuned": {f: family_report(None, f) for f in FAMILIES},
        "best_hybrid": report(hybrid),
        "seconds": round(time.perf_counter() - started, 1),
    }


def main() -> None:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--dataset", default="../shared/data/locomo-dev.json")
    parser.add_argument("--embedder", choices=("wordllama", "minilm"), default="wordllama")
    parser.add_argument("--minilm-path", default="")
    print(json.dumps(run(parser.parse_args())))


if __name__ == "__main__":
    main()
