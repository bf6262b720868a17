"""Applying batches of the log to both lanes, and resuming after a crash."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from cairn_server.errors import InvalidArgument
from recall_service.projections.documents import IndexedRecord, TextSettings
from recall_service.projections.embedders import ClientVectors, WordLlamaEmbedder
from recall_service.projections.filters import SearchFilter
from recall_service.projections.indexing import apply_batch, resume_from
from recall_service.projections.lexical import LexicalIndex
from recall_service.projections.vectors import QdrantEdgeIndex

ALL = SearchFilter("t", ("s",))
SETTINGS = TextSettings(neighbours_before=1, neighbours_after=1)
WORDS = ["kayak", "lantern", "meadow", "harbor", "violin"]


def log(n: int, vector: bool = False) -> list[IndexedRecord]:
    return [
        IndexedRecord(
            "t",
            "s",
            seq,
            "ana",
            float(seq),
            f"{WORDS[seq - 1]} story",
            vector=(float(seq), 1.0) if vector else None,
        )
        for seq in range(1, n + 1)
    ]


@pytest.fixture(scope="module")
def embedder() -> WordLlamaEmbedder:
    return WordLlamaEmbedder()


def test_a_new_batch_reindexes_the_record_whose_after_context_it_extends(
    tmp_path: Path, embedder: WordLlamaEmbedder
) -> None:
    lexical = LexicalIndex(None)
    vectors = QdrantEdgeIndex(tmp_path / "edge", embedder.dim)
    records = log(5)
    assert apply_batch(records[:3], {"s": 1}, lexical, vectors, embedder, SETTINGS) == 3
    # Record 3 is indexed before "harbor" (record 4) exists: nothing matches through context.
    assert [h.key.seq for h in lexical.search("harbor", 10, ALL)] == []
    # The next batch reads record 2 for context and re-indexes record 3.
    written = apply_batch(records[1:5], {"s": 4}, lexical, vectors, embedder, SETTINGS)
    assert written == 3
    found = [h.key.seq for h in lexical.search("harbor", 10, ALL)]
    assert found[0] == 4  # its own body first, then 3 and 5 through their contexts
    assert sorted(found[1:]) == [3, 5]
    assert (lexical.last_applied("s"), vectors.last_applied("s")) == (5, 5)
    assert (lexical.count(ALL), vectors.count(ALL)) == (5, 5)
    vectors.close()


def test_resume_starts_after_the_lane_that_is_behind(
    tmp_path: Path, embedder: WordLlamaEmbedder
) -> None:
    lexical = LexicalIndex(None)
    vectors = QdrantEdgeIndex(tmp_path / "edge", embedder.dim)
    records = log(5)
    assert resume_from("s", lexical, vectors) == 1
    apply_batch(records[:3], {"s": 1}, lexical, vectors, embedder, SETTINGS)
    # A crash after the vector lane took records 4-5 but before Tantivy did:
    tail = records[3:]
    vectors.upsert(tail, embedder.embed([r.text for r in tail]), {"s": 5})
    assert resume_from("s", lexical, vectors) == 4
    apply_batch(records[2:5], {"s": 4}, lexical, vectors, embedder, SETTINGS)
    assert resume_from("s", lexical, vectors) == 6
    assert (lexical.count(ALL), vectors.count(ALL)) == (5, 5)
    vectors.close()


def test_client_vectors_are_stored_as_given_normalised(tmp_path: Path) -> None:
    lexical = LexicalIndex(None)
    vectors = QdrantEdgeIndex(tmp_path / "edge", 2)
    apply_batch(log(3, vector=True), {"s": 1}, lexical, vectors, ClientVectors(2), SETTINGS)
    hits = vectors.search(np.array([3.0, 1.0], dtype=np.float32) / np.sqrt(10), 1, ALL)
    assert hits[0].key.seq == 3
    assert hits[0].score == pytest.approx(1.0, abs=1e-6)
    vectors.close()


def test_a_record_without_its_client_vector_is_refused(tmp_path: Path) -> None:
    vectors = QdrantEdgeIndex(tmp_path / "edge", 2)
    with pytest.raises(
        InvalidArgument, match=r"vector: the stream uses client vectors; records \[1, 2\]"
    ):
        apply_batch(log(2), {"s": 1}, LexicalIndex(None), vectors, ClientVectors(2), SETTINGS)
    assert vectors.count(ALL) == 0
    vectors.close()
