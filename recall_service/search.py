"""Searching: scope, wait for `min_seq`, both lanes, fusion, conflicts, records from the log.

`SearchEngine.search` is what the servicer calls. It resolves the streams the caller may
read (`search_scope`), waits until the indexes hold every `min_seq` (`index_wait`), then on a
search thread queries the lanes with one filter — tenant, those streams, authors, time, tags —
fuses them (`projections.fusion.convex` with its defaults, the setting docs/search.md
reports) or keeps one lane, reads
the hits' records from the log (the one source of truth: a record redacted since it was
indexed is dropped), and marks conflicts among the top hits (`projections.conflicts`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from cairn_server import tracing
from cairn_server.auth import Principal
from recall_service.core import Deps
from recall_service.index_plan import index_key, indexed_record, split_key
from recall_service.index_wait import Progress, until_indexed
from recall_service.indexer import Indexer
from recall_service.models import Record, Stream
from recall_service.projection_set import Projections
from recall_service.projections.conflicts import ConflictSettings, mark_conflicts
from recall_service.projections.documents import IndexedRecord, RecordKey
from recall_service.projections.filters import SearchFilter
from recall_service.projections.fusion import convex, single_lane
from recall_service.projections.hits import FusedHit, LaneHit
from recall_service.projections.vector_worker import VectorIndexBusy
from recall_service.search_query import Hit, SearchMode, SearchQuery, check_query
from recall_service.search_scope import Scope, resolve
from recall_service.store.base import LogReader, LogStore

# Each lane returns at least this many candidates for fusion (the depth the fusion settings
# were measured with, docs/search.md).
LANE_DEPTH = 50


@dataclass(frozen=True, slots=True)
class SearchSettings:
    """`max_wait_seconds` bounds a `min_seq` wait; `threads` run the lanes."""

    max_wait_seconds: float = 5.0
    threads: int = 4
    conflicts: ConflictSettings = field(default_factory=ConflictSettings)


def search_filter(scope: Sequence[Stream], query: SearchQuery, tenant: str) -> SearchFilter:
    """The one filter both lanes apply."""
    return SearchFilter(
        tenant=tenant,
        stream_ids=tuple(index_key(s.tenant, s.id) for s in scope),
        authors=query.authors,
        start=None if query.start is None else query.start / 1_000_000,
        end=None if query.end is None else query.end / 1_000_000,
        tags_any=query.tags_any,
        tags_all=query.tags_all,
    )


@dataclass(frozen=True, slots=True)
class Answer:
    """A search's hits, best first; `vector_lane_skipped`: a HYBRID search answered by the
    lexical lane alone while the vector index built its search graph."""

    hits: list[Hit]
    vector_lane_skipped: bool = False


def lanes(
    projections: Projections,
    query: SearchQuery,
    flt: SearchFilter,
    pool: Executor | None = None,
) -> tuple[list[LaneHit], list[LaneHit], bool]:
    """The lexical and vector lanes' hits (a lane the mode leaves out returns none), and
    whether a HYBRID search went without the vector lane because the vector index is busy
    building its search graph (in VECTOR mode that is an error: `VectorIndexBusy`).

    A HYBRID search overlaps the lanes whenever the vector index answers from another
    process and so waits without the GIL: the Edge worker takes the query before this thread
    runs the lexical lane and is read after it (`search_started`); any other such index (a
    Qdrant server) is asked on a thread of `pool`.
    """
    depth = max(LANE_DEPTH, query.limit)
    lexical: list[LaneHit] = []
    vector: list[LaneHit] = []
    pending: Callable[[], list[LaneHit]] | None = None
    skipped = False
    if query.vector:
        with tracing.span("search.embed"):
            if query.query_vector:
                client = projections.client_vectors
                assert client is not None, "check_query refuses vectors elsewhere"
                qvec = client.check([query.query_vector], "query_vector")[0]
            else:
                qvec = projections.embedder.embed([query.text])[0]
        if np.any(qvec):  # a query of no known token matches nothing, not everything
            started = getattr(projections.vectors, "search_started", None)
            try:
                if started is not None and query.lexical:
                    pending = started(qvec, depth, flt)
                elif pool is not None and query.lexical:
                    pending = pool.submit(projections.vectors.search, qvec, depth, flt).result
                else:
                    with tracing.span("search.vector"):
                        vector = projections.vectors.search(qvec, depth, flt)
            except VectorIndexBusy:
                if query.mode is not SearchMode.HYBRID:
                    raise
                skipped = True
    try:
        if query.lexical:
            with tracing.span("search.lexical"):
                lexical = projections.lexical.search(query.text, depth, flt)
    finally:
        if pending is not None:
            with tracing.span("search.vector"):
                try:
                    vector = pending()
                except VectorIndexBusy:
                    skipped = True
    return _by_score(lexical), _by_score(vector), skipped


def _by_score(hits: list[LaneHit]) -> list[LaneHit]:
    """A lane's hits best first, equal scores in (stream, seq) order: the order an index
    returns ties in depends on its history (segments, replaced documents), this does not."""
    return sorted(hits, key=lambda h: (-h.score, h.key.stream_id, h.key.seq))


def fuse(query: SearchQuery, lexical: list[LaneHit], vector: list[LaneHit]) -> list[FusedHit]:
    """Fused hits, best first."""
    if query.mode is SearchMode.LEXICAL:
        return single_lane(lexical, "lexical")
    if query.mode is SearchMode.VECTOR:
        return single_lane(vector, "vector")
    return convex(lexical, vector)


def with_records(
    reader: LogReader, scope: Sequence[Stream], fused: list[FusedHit], wanted: int
) -> tuple[list[FusedHit], dict[RecordKey, Record]]:
    """The first `wanted` hits whose records exist with content in the log, and the records."""
    streams = {index_key(s.tenant, s.id): s for s in scope}
    kept: list[FusedHit] = []
    found: dict[RecordKey, Record] = {}
    start = 0
    while len(kept) < wanted and start < len(fused):
        chunk = fused[start : start + wanted - len(kept)]
        start += len(chunk)
        read = reader.records_across([(streams[h.key.stream_id], h.key.seq) for h in chunk])
        for hit in chunk:
            record = read.get((streams[hit.key.stream_id].key, hit.key.seq))
            if record is not None:
                found[hit.key] = record
        kept.extend(h for h in chunk if h.key in found and found[h.key].content is not None)
    return kept, found


def run(
    projections: Projections,
    store: LogStore,
    scope: Scope,
    query: SearchQuery,
    tenant: str,
    conflicts: ConflictSettings,
    pool: Executor | None = None,
) -> Answer:
    """The search itself, once the scope is known and the indexes are fresh enough; `pool`
    as for `lanes`."""
    if not scope.streams:
        return Answer([])
    flt = search_filter(scope.streams, query, tenant)
    lexical, vector, skipped = lanes(projections, query, flt, pool)
    fused = fuse(query, lexical, vector)
    wanted = max(query.limit, conflicts.window)
    kept, records = with_records(store.reader(), scope.streams, fused, wanted)
    indexed: dict[RecordKey, IndexedRecord] = {
        h.key: indexed_record(tenant, records[h.key]) for h in kept[: conflicts.window]
    }
    marked = mark_conflicts(kept, indexed, conflicts)
    hits = [
        Hit(
            record=records[h.key],
            score=h.score,
            lexical_rank=h.lexical_rank,
            vector_rank=h.vector_rank,
            conflicts_with=tuple((split_key(k.stream_id)[1], k.seq) for k in h.conflicts_with),
        )
        for h in marked[: query.limit]
    ]
    return Answer(hits, skipped)


class Searcher(Protocol):
    """What the servicer searches with, and the log tells when it grew: `SearchEngine` in
    this process, or `index_client.IndexProcess`, which runs one in a process of its own."""

    async def search(
        self, principal: Principal, query: SearchQuery, time_left: float | None = None
    ) -> Answer:
        """Hits for `query`, best first."""

    def notify(self, records: Sequence[Record] = ()) -> None:
        """The log grew (called after each commit, on the writer's thread; never waits)."""


class SearchEngine:
    """Runs searches for the servicer: the access check and the `min_seq` wait on the event
    loop's terms, the lanes on a small thread pool."""

    def __init__(
        self,
        deps: Deps,
        projections: Projections,
        indexer: Indexer,
        settings: SearchSettings | None = None,
    ) -> None:
        self.deps = deps
        self.projections = projections
        self.indexer = indexer
        self.settings = settings or SearchSettings()
        self.progress = Progress()
        indexer.add_listener(self.progress.fire)
        self._pool = ThreadPoolExecutor(self.settings.threads, thread_name_prefix="cairn-search")
        # The vector lane of a HYBRID search, beside its lexical lane (a pool of its own, so
        # that searches waiting for their vector lanes never hold every thread it needs);
        # pointless when the vector index holds the GIL while it searches (Edge inline).
        self._vector_pool = (
            None
            if getattr(projections.vectors, "holds_gil", False)
            else ThreadPoolExecutor(self.settings.threads, thread_name_prefix="cairn-search-vector")
        )

    def start(self, principal: Principal, query: SearchQuery) -> Future[Answer] | None:
        """Checks `query` (raising what `check_query` raises) and, when it names no
        `min_seq`, starts it on a search thread; None for a query that must wait for the
        indexes first (`search` does that, on an event loop)."""
        check_query(query, self.projections.client_vectors)
        if query.min_seq:
            return None
        return self._pool.submit(self._run, principal, query)

    async def search(
        self, principal: Principal, query: SearchQuery, time_left: float | None = None
    ) -> Answer:
        """Hits for `query`, best first. `time_left` is what remains of the caller's
        deadline: a `min_seq` wait ends before it."""
        started = self.start(principal, query)
        if started is not None:  # nothing to wait for: one hop to a search thread
            return await asyncio.wrap_future(started)
        loop = asyncio.get_running_loop()
        scope = await loop.run_in_executor(self._pool, resolve, self.deps, principal, query)
        if scope.wanted:
            wait = self.settings.max_wait_seconds
            if time_left is not None:
                wait = min(wait, max(0.0, time_left - 0.05))
            self.indexer.want(scope.wanted)
            await until_indexed(self.indexer.applied, self.progress, scope.wanted, wait)
        return await loop.run_in_executor(self._pool, self._run, principal, query, scope)

    def notify(self, records: Sequence[Record] = ()) -> None:
        """The log grew: wakes the indexer."""
        self.indexer.notify(records)

    def _run(self, principal: Principal, query: SearchQuery, scope: Scope | None = None) -> Answer:
        """The search on this thread, resolving the scope first unless it is given."""
        if scope is None:
            scope = resolve(self.deps, principal, query)
        return run(
            self.projections,
            self.deps.store,
            scope,
            query,
            principal.tenant,
            self.settings.conflicts,
            self._vector_pool,
        )

    def close(self) -> None:
        """Stops the search threads."""
        self._pool.shutdown(wait=True)
        if self._vector_pool is not None:
            self._vector_pool.shutdown(wait=True)
