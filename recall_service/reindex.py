"""Rebuilding the search projections from the log alone (`cairn recall reindex`).

Everything the indexes hold is a function of the log (`index_plan`), so a rebuild empties
them — all of them, or one stream's entries and markers — and runs the indexer's own catch-up
from seq 1, in the indexer's batches, with nothing else writing. With Qdrant Edge the search
graph is built at the end, so the server starts on an optimised index.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from cairn_server.errors import NotFound
from recall_service.index_plan import index_key
from recall_service.indexer import Indexer, IndexerSettings
from recall_service.models import Stream
from recall_service.projection_set import Projections
from recall_service.store.base import LogStore


@dataclass(frozen=True, slots=True)
class Rebuilt:
    """What a rebuild did."""

    streams: int
    records: int
    seconds: float


def streams_to_rebuild(
    store: LogStore, stream_id: str | None = None, tenant: str | None = None
) -> list[Stream]:
    """Every stream of the log, or those with this id (in `tenant`, or in any tenant)."""
    found = store.reader().changed_streams(0)
    if stream_id is not None:
        found = [s for s in found if s.id == stream_id]
    if tenant is not None:
        found = [s for s in found if s.tenant == tenant]
    if stream_id is not None and not found:
        where = f" in tenant '{tenant}'" if tenant else ""
        raise NotFound(f"stream '{stream_id}' not found{where}")
    return found


def forget_stream(projections: Projections, stream: Stream) -> None:
    """Removes one stream's entries and markers from both lanes (every seq it may hold)."""
    key = index_key(stream.tenant, stream.id)
    last = max(
        stream.size,
        projections.lexical.last_applied(key),
        projections.vectors.last_applied(key),
    )
    seqs = range(1, last + 1)
    projections.vectors.delete(key, seqs, {key: 0})
    projections.lexical.delete(key, seqs)
    projections.lexical.mark_applied({key: 0})
    projections.lexical.commit()


def rebuild(
    store: LogStore,
    projections: Projections,
    streams: list[Stream] | None = None,
    *,
    batch_records: int = 2048,
    progress: Callable[[int], None] | None = None,
) -> Rebuilt:
    """Empties the projections (all, or `streams` only) and refills them from the log.

    `progress` is called with the number of records applied so far."""
    started = time.perf_counter()
    if streams is None:
        projections.reset()
        streams = streams_to_rebuild(store)
    else:
        for stream in streams:
            forget_stream(projections, stream)
    indexer = Indexer(
        store, projections, IndexerSettings(batch_records=batch_records, optimize_after=0)
    )
    indexer.track(streams)
    records = indexer.drain(progress)
    optimize = getattr(projections.vectors, "optimize", None)
    if optimize is not None:
        optimize()
    return Rebuilt(len(streams), records, round(time.perf_counter() - started, 3))
