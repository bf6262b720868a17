"""Conflicting hits: which top hits disagree, and how to order them by evidence.

Definitions (all over the top `window` hits of one search):

- Two records *overlap in subject* when they share enough subject words — the Jaccard index
  of their `content_terms` is at least `subject_overlap` — or, when vectors are given, their
  cosine similarity is at least `subject_similarity`.
- They *say the same* when that Jaccard index is at least `same_claim`: the same words up to
  a few, i.e. a restatement. Saying the same by a different author is *corroboration*.
- They *conflict* when they come from different authors, overlap in subject, and do not say
  the same: two participants wrote different things about one subject. Records of one author
  never conflict with each other (a later record of one author is an update, not a dispute).

Without a model of entailment this cannot tell a contradiction from a complement; it flags
candidates for the reader, and it never drops anything.

Ranking: the conflict graph's connected components are *conflict groups*. Inside a group the
hits are reordered by evidence, `reliability * w_r + recency * w_t + corroboration * w_c`, and
put back into the positions the group occupied, so hits outside every group keep their place.
`reliability` comes from a per-author table (default 0.5); `recency` is the record's time
scaled onto [0, 1] across its group; `corroboration` is `n / (n + 1)` for `n` other authors
who say the same among the window.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from recall_service.projections.documents import IndexedRecord, RecordKey, content_terms
from recall_service.projections.hits import FusedHit


@dataclass(frozen=True, slots=True)
class ConflictSettings:
    """Thresholds and evidence weights (see the module docstring)."""

    window: int = 10
    subject_overlap: float = 0.3
    subject_similarity: float = 0.85
    same_claim: float = 0.8
    reliability: Mapping[str, float] = field(default_factory=dict)
    default_reliability: float = 0.5
    weight_reliability: float = 1.0
    weight_recency: float = 1.0
    weight_corroboration: float = 1.0


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    """Shared elements over all elements (|a & b| / |a | b|); 0.0 for two empty sets."""
    union = len(a | b)
    return len(a & b) / union if union else 0.0


def _cosine(a: npt.NDArray[np.float32], b: npt.NDArray[np.float32]) -> float:
    na, nb = float(np.linalg.norm(a)), float(np.linalg.norm(b))
    return float(np.dot(a, b)) / (na * nb) if na > 0 and nb > 0 else 0.0


@dataclass(frozen=True, slots=True)
class Relation:
    """How two records relate."""

    overlap: bool
    same: bool


def relate(
    a: IndexedRecord,
    b: IndexedRecord,
    settings: ConflictSettings,
    vector_a: npt.NDArray[np.float32] | None = None,
    vector_b: npt.NDArray[np.float32] | None = None,
) -> Relation:
    """Whether `a` and `b` overlap in subject and whether they say the same."""
    return _relation(content_terms(a.text), content_terms(b.text), settings, vector_a, vector_b)


def _relation(
    terms_a: frozenset[str],
    terms_b: frozenset[str],
    settings: ConflictSettings,
    vector_a: npt.NDArray[np.float32] | None,
    vector_b: npt.NDArray[np.float32] | None,
) -> Relation:
    overlap_terms = jaccard(terms_a, terms_b)
    similar = (
        vector_a is not None
        and vector_b is not None
        and _cosine(vector_a, vector_b) >= settings.subject_similarity
    )
    return Relation(
        overlap=overlap_terms >= settings.subject_overlap or similar,
        same=overlap_terms >= settings.same_claim,
    )


def conflicts_between(
    records: Sequence[IndexedRecord],
    settings: ConflictSettings,
    vectors: Mapping[RecordKey, npt.NDArray[np.float32]] | None = None,
) -> tuple[dict[RecordKey, set[RecordKey]], dict[RecordKey, set[str]]]:
    """The conflict graph among `records`, and for each record the other authors who say
    the same (its corroborators)."""
    keys = [RecordKey(r.stream_id, r.seq) for r in records]
    graph: dict[RecordKey, set[RecordKey]] = {k: set() for k in keys}
    corroborators: dict[RecordKey, set[str]] = {k: set() for k in keys}
    terms = [content_terms(r.text) for r in records]
    for i, a in enumerate(records):
        for j in range(i + 1, len(records)):
            b = records[j]
            if a.author == b.author:
                continue
            rel = _relation(
                terms[i],
                terms[j],
                settings,
                None if vectors is None else vectors.get(keys[i]),
                None if vectors is None else vectors.get(keys[j]),
            )
            if rel.same:
                corroborators[keys[i]].add(b.author)
                corroborators[keys[j]].add(a.author)
            elif rel.overlap:
                graph[keys[i]].add(keys[j])
                graph[keys[j]].add(keys[i])
    return graph, corroborators


def _groups(
    graph: Mapping[RecordKey, set[RecordKey]], order: Sequence[RecordKey]
) -> list[list[RecordKey]]:
    seen: set[RecordKey] = set()
    groups = []
    for start in order:
        if start in seen or not graph[start]:
            continue
        group, stack = [], [start]
        seen.add(start)
        while stack:
            key = stack.pop()
            group.append(key)
            for other in graph[key]:
                if other not in seen:
                    seen.add(other)
                    stack.append(other)
        groups.append(group)
    return groups


def evidence_scores(
    group: Sequence[IndexedRecord],
    corroborators: Mapping[RecordKey, set[str]],
    settings: ConflictSettings,
) -> dict[RecordKey, float]:
    """The evidence score of each record of one conflict group."""
    times = [r.created_at for r in group]
    low, span = min(times), max(times) - min(times)
    scores = {}
    for r in group:
        key = RecordKey(r.stream_id, r.seq)
        reliability = settings.reliability.get(r.author, settings.default_reliability)
        recency = (r.created_at - low) / span if span > 0 else 1.0
        n = len(corroborators.get(key, ()))
        scores[key] = (
            settings.weight_reliability * reliability
            + settings.weight_recency * recency
            + settings.weight_corroboration * n / (n + 1)
        )
    return scores


def mark_conflicts(
    hits: Sequence[FusedHit],
    records: Mapping[RecordKey, IndexedRecord],
    settings: ConflictSettings | None = None,
    vectors: Mapping[RecordKey, npt.NDArray[np.float32]] | None = None,
) -> list[FusedHit]:
    """`hits` with conflict groups in the top window reordered by evidence and marked.

    Every hit is returned; hits beyond the window and hits in no group keep their position.
    A hit's `conflicts_with` lists the records it conflicts with, in (stream, seq) order.
    """
    settings = settings or ConflictSettings()
    top = [h for h in hits[: settings.window] if h.key in records]
    graph, corroborators = conflicts_between([records[h.key] for h in top], settings, vectors)
    out = list(hits)
    position = {h.key: i for i, h in enumerate(hits)}
    by_key = {h.key: h for h in hits}
    for group in _groups(graph, [h.key for h in top]):
        scores = evidence_scores([records[k] for k in group], corroborators, settings)
        slots = sorted(position[k] for k in group)
        ranked = sorted(group, key=lambda k: (-scores[k], position[k]))
        for slot, key in zip(slots, ranked, strict=True):
            conflicting = tuple(sorted(graph[key], key=lambda k: (k.stream_id, k.seq)))
            out[slot] = by_key[key]._replace(conflicts_with=conflicting)
    return out
