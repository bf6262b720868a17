"""The two search projections together: the lexical lane, the vector lane and the embedder
that feeds the vector lane, written as one step per `IndexBatch`.

Each lane keeps its own per-stream marker (the last seq it applied) inside the index, written
with the data it covers (docs/search.md). A step writes the vector lane first — deletions,
then the records in chunks with the markers in the last chunk — and then the lexical lane in
one Tantivy commit. A crash anywhere leaves each lane's marker at or behind its data, and the
indexer resumes each stream from the lower of the two markers: re-applying overwrites by id,
so nothing is skipped and nothing is indexed twice.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np

from recall_service.index_plan import IndexBatch
from recall_service.projections.documents import IndexedRecord, TextSettings
from recall_service.projections.embedders import (
    ClientVectors,
    Embedder,
    SumPooling,
    Vectors,
    embed_indexed,
)
from recall_service.projections.lexical import LexicalIndex
from recall_service.projections.vectors import VectorIndex

# Qdrant Edge holds the GIL while it applies an upsert: chunks keep each hold short.
VECTOR_CHUNK = 256


@dataclass(frozen=True, slots=True)
class Applied:
    """What one step wrote."""

    records: int
    vectors: int
    deleted: int
    embedded: int
    embedding_seconds: float


@dataclass
class Projections:
    """The lexical index, the vector index and the embedder, with the text settings both
    lanes index under. `context_weight` weighs a record's context in its vector."""

    lexical: LexicalIndex
    vectors: VectorIndex
    embedder: Embedder
    text: TextSettings = field(default_factory=TextSettings)
    context_weight: float = 1.0

    @property
    def client_vectors(self) -> ClientVectors | None:
        """The embedder when vectors come from clients, else None."""
        return self.embedder if isinstance(self.embedder, ClientVectors) else None

    def apply(self, batch: IndexBatch, vectors: bool = True) -> Applied:
        """Writes one batch to both lanes (see the module docstring for the order); with
        `vectors=False` to the lexical lane alone (while the vector index builds its search
        graph: the vector lane's markers stay where they are, so the batch is applied to it
        again later, and the lexical lane's copy is overwritten then)."""
        records = batch.records
        texts = [batch.texts[i] for i in batch.targets]
        if not vectors:
            for key, seqs in batch.deletes.items():
                self.lexical.delete(key, seqs)
            self.lexical.apply(records, texts, batch.marks)
            return Applied(len(records), 0, sum(map(len, batch.deletes.values())), 0, 0.0)
        started = time.perf_counter()
        with_vectors, matrix, embedded = self._vectors(batch, records)
        spent = time.perf_counter() - started if embedded else 0.0
        deleted = 0
        for key, seqs in batch.deletes.items():
            self.vectors.delete(key, seqs, {})
            deleted += len(seqs)
        for chunk, rows, last in _chunks(with_vectors, VECTOR_CHUNK):
            self.vectors.upsert(chunk, matrix[rows], batch.marks if last else {})
        for key, seqs in batch.deletes.items():
            self.lexical.delete(key, seqs)
        self.lexical.apply(records, texts, batch.marks)
        return Applied(len(records), len(with_vectors), deleted, embedded, spent)

    def _vectors(
        self, batch: IndexBatch, records: list[IndexedRecord]
    ) -> tuple[list[IndexedRecord], Vectors, int]:
        """The records that get a vector, their vectors, and how many texts were embedded."""
        client = self.client_vectors
        if client is not None:
            kept = [r for r in records if r.vector is not None]
            if not kept:
                return [], np.zeros((0, client.dim), dtype=np.float32), 0
            return kept, client.check([r.vector or () for r in kept]), 0
        if not records:
            return [], np.zeros((0, self.embedder.dim), dtype=np.float32), 0
        if isinstance(self.embedder, SumPooling):
            # Context vectors are sums of the neighbours' token sums: embed the whole window.
            window = embed_indexed(self.embedder, batch.texts, self.context_weight)
            return records, window[batch.targets], len(batch.texts)
        texts = [batch.texts[i] for i in batch.targets]
        return records, embed_indexed(self.embedder, texts, self.context_weight), 2 * len(texts)

    def reset(self) -> None:
        """Empties both lanes (before a rebuild from the log)."""
        self.vectors.reset()
        self.lexical.reset()

    def close(self) -> None:
        """Makes both lanes durable and releases them."""
        self.vectors.close()
        self.lexical.close()
        closer = getattr(self.embedder, "close", None)
        if closer is not None:
            closer()


def _chunks(
    records: list[IndexedRecord], size: int
) -> Iterator[tuple[list[IndexedRecord], slice, bool]]:
    """Consecutive chunks of `records`, their rows, and whether each is the last; an empty
    list still yields one (empty) chunk, which carries the markers."""
    if not records:
        yield [], slice(0, 0), True
        return
    for start in range(0, len(records), size):
        end = min(start + size, len(records))
        yield records[start:end], slice(start, end), end == len(records)
