"""Applying a batch of the log to both lanes: what the indexer does for each batch it tails.

The indexer reads, per stream, the records after `resume_from(...)` plus the few before them
that contexts need (`documents.read_seqs`), and calls `apply_batch`. Each lane commits its
records and its markers atomically; the two lanes are independent, so after a crash one may be
ahead of the other. `resume_from` starts from the lane that is behind: re-applying records to
the lane that is ahead only overwrites them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from cairn_server.errors import InvalidArgument
from recall_service.projections.documents import (
    IndexedRecord,
    IndexedText,
    TextSettings,
    indexed_texts,
    reindexed_seqs,
)
from recall_service.projections.embedders import (
    ClientVectors,
    Embedder,
    SumPooling,
    Vectors,
    embed_indexed,
)
from recall_service.projections.lexical import LexicalIndex
from recall_service.projections.vectors import VectorIndex


def resume_from(stream_id: str, lexical: LexicalIndex, vectors: VectorIndex) -> int:
    """The first seq of `stream_id` that at least one lane has not applied."""
    return min(lexical.last_applied(stream_id), vectors.last_applied(stream_id)) + 1


def apply_batch(
    window: Sequence[IndexedRecord],
    first_new: Mapping[str, int],
    lexical: LexicalIndex,
    vectors: VectorIndex,
    embedder: Embedder,
    settings: TextSettings,
    context_weight: float = 1.0,
) -> int:
    """Indexes the new records of `window` (and those whose after-context they extend).

    `window` holds, per stream, the new records from `first_new[stream]` on, preceded by the
    records their contexts need; every stream in `first_new` gets its marker moved to the
    last seq of the window. Returns how many records were written to each lane.
    """
    texts = indexed_texts(window, settings)
    last: dict[str, int] = {}
    for record in window:
        if record.stream_id in first_new:
            last[record.stream_id] = max(last.get(record.stream_id, 0), record.seq)
    wanted = [
        i
        for i, r in enumerate(window)
        if r.stream_id in first_new
        and r.seq in reindexed_seqs(first_new[r.stream_id], last[r.stream_id], settings)
    ]
    chosen = [window[i] for i in wanted]
    matrix = record_vectors(window, texts, wanted, embedder, context_weight)
    vectors.upsert(chosen, matrix, last)
    lexical.apply(chosen, [texts[i] for i in wanted], last)
    return len(chosen)


def record_vectors(
    window: Sequence[IndexedRecord],
    texts: Sequence[IndexedText],
    positions: Sequence[int],
    embedder: Embedder,
    context_weight: float = 1.0,
) -> Vectors:
    """The vectors of `window[i]` for each i in `positions`: the client's, or embedded from
    `texts` (the indexed texts of the whole window, so that contexts can be pooled)."""
    if isinstance(embedder, ClientVectors):
        missing = [window[i].seq for i in positions if window[i].vector is None]
        if missing:
            raise InvalidArgument(
                "vector", f"the stream uses client vectors; records {missing} have none"
            )
        return embedder.check([window[i].vector or () for i in positions])
    if isinstance(embedder, SumPooling):  # contexts are pooled from the window's bodies
        return embed_indexed(embedder, texts, context_weight)[list(positions)]
    return embed_indexed(embedder, [texts[i] for i in positions], context_weight)
