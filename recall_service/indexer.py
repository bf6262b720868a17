"""The indexer: tails the log into the search projections, on a thread of its own.

Writes never wait for it: a write returns once the log has committed, and the store's
`on_append` only wakes the indexer. The indexer finds where the log has grown — the streams
whose last record is recent (`changed_streams`, a cheap indexed query), every stream at
start and every `full_scan_seconds` — and applies each stream from the lower of its two
lanes' markers, in batches of about `batch_records` records across streams, each read in one
snapshot of the log. On PostgreSQL other replicas append to the same log; their writes are
found by the same query every `poll_seconds`, and a search that names a `min_seq` asks for
its streams at once (`want`).

A failure (the vector server unreachable, a full disk) is logged and retried after a pause;
the lag metrics grow meanwhile, and writes are not affected.

The vector index's search-graph build (Qdrant Edge's `optimize`, minutes at a million
records) runs on a thread of its own when the index answers from another process (the Edge
worker). Meanwhile the indexer keeps applying the log to the lexical lane alone — searches
are answered by that lane during a build, so `applied` is its marker then — and once the
build ends it brings the vector lane up from its own markers. With Edge in this process the
build holds the GIL throughout, so it runs on the indexer thread and everything waits.

With `IndexerSettings.nice` the indexer thread runs at a lower CPU priority than the RPCs:
on a machine whose cores are busy, a write waiting for a core goes before a batch of
indexing.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from cairn_server import thread_priority
from cairn_server.metrics import Metrics
from recall_service.index_plan import index_key, plan
from recall_service.index_reads import read_slice
from recall_service.models import Record, Stream
from recall_service.projection_set import Projections
from recall_service.projections.vector_worker import VectorIndexBusy
from recall_service.store.base import LogStore

log = logging.getLogger("cairn.recall.indexer")

# A stream's last time may be behind the newest time seen by up to this much (replicas'
# clocks differ; a slow transaction commits late): the tail query looks back this far.
TAIL_SLACK_US = 10_000_000


@dataclass(frozen=True, slots=True)
class IndexerSettings:
    """How the indexer paces itself.

    `optimize_after` / `optimize_idle_seconds`: with a vector index that builds its search
    graph on request (Qdrant Edge), build it once that many records arrived since the last
    build, the log has been quiet that long and the indexer has caught up (0 turns it off;
    `should_optimize`).
    """

    batch_records: int = 1024
    poll_seconds: float = 0.25
    # After a pass that applied records, wait this long (unless a search waits for a
    # min_seq) so that a stream of writes is indexed in fewer, larger batches: fewer Tantivy
    # commits and fsyncs competing with the log's.
    coalesce_seconds: float = 0.1
    full_scan_seconds: float = 30.0
    retry_seconds: float = 1.0
    optimize_after: int = 20_000
    optimize_idle_seconds: float = 2.0
    # The indexer thread's nice value is raised by this much (Linux; 0 leaves it level):
    # when the cores are busy, RPCs run first and indexing takes what they leave
    # (`cairn_server.thread_priority`). A trade: a few % more writes/s on busy cores against
    # searches that see new records later (docs/search.md, "At a lower CPU priority"). 9 is
    # what Qdrant Edge gives its own search-graph build threads.
    nice: int = 0


def should_optimize(
    settings: IndexerSettings, unoptimized: int, applied: int, quiet_seconds: float
) -> bool:
    """Whether to build the vector index's search graph now: enough vectors arrived since the
    last build, the log has been quiet a while, and the last pass applied nothing — so the
    indexer has caught up (a pass drains the streams only to the sizes it read; after a bulk
    load the next pass may still find most of it, and a build blocks the indexer meanwhile)."""
    return bool(
        settings.optimize_after
        and unoptimized >= settings.optimize_after
        and quiet_seconds >= settings.optimize_idle_seconds
        and applied == 0
    )


class Indexer:
    """Keeps the projections caught up with the log (see the module docstring)."""

    def __init__(
        self,
        store: LogStore,
        projections: Projections,
        settings: IndexerSettings | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        self.store = store
        self.projections = projections
        self.settings = settings or IndexerSettings()
        self.metrics = metrics
        self._streams: dict[str, Stream] = {}  # by index key, as last read from the log
        # Each lane's marker per index key, read from the lane once and then tracked.
        self._lexical: dict[str, int] = {}
        self._vector: dict[str, int] = {}
        self._build: threading.Thread | None = None
        self._next_build = 0.0  # monotonic time before which no build starts (after a failure)
        self._wanted: dict[str, Stream] = {}
        self._wanted_lock = threading.Lock()
        self._wake = threading.Event()
        self._hurry = threading.Event()  # a search waits for a min_seq
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._listeners: list[Callable[[], None]] = []
        self._watermark = 0  # the newest last_time seen, µs
        self._last_full_scan = float("-inf")
        self._last_write = time.monotonic()
        self._unoptimized = 0
        self._lag_checked = 0.0

    # -- lifecycle ------------------------------------------------------------------------

    def start(self) -> None:
        """Starts the background thread (the lag gauges start at 0)."""
        if self.metrics is not None:
            for lane in ("lexical", "vector"):
                self.metrics.index_lag_records.labels(lane).set(0)
                self.metrics.index_lag_seconds.labels(lane).set(0)
        self._thread = threading.Thread(target=self._loop, name="cairn-indexer", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 30.0) -> None:
        """Finishes the batch in hand and stops the thread."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)

    # -- signals from the rest of the server ----------------------------------------------

    def notify(self, records: Sequence[Record]) -> None:
        """Called by the store after a commit: wake up (never blocks the writer)."""
        self._last_write = time.monotonic()
        self._wake.set()

    def want(self, streams: Iterable[Stream]) -> None:
        """Index these streams (as read from the log just now) before anything else."""
        with self._wanted_lock:
            for stream in streams:
                self._wanted[index_key(stream.tenant, stream.id)] = stream
        self._hurry.set()
        self._wake.set()

    def add_listener(self, callback: Callable[[], None]) -> None:
        """Calls `callback` (on the indexer thread) after every applied batch."""
        self._listeners.append(callback)

    @property
    def building(self) -> bool:
        """True while the vector index builds its search graph on the build thread."""
        return self._build is not None and self._build.is_alive()

    def applied(self, tenant: str, stream_id: str) -> int:
        """The seq through which searches see the stream: both lanes hold it — or, during a
        graph build, the lexical lane, which answers them meanwhile."""
        key = index_key(tenant, stream_id)
        lexical = self._lexical_mark(key)
        vector = None if self.building else self._vector_mark(key)
        return lexical if vector is None else min(lexical, vector)

    def _lexical_mark(self, key: str) -> int:
        found = self._lexical.get(key)
        if found is None:
            found = self._lexical[key] = self.projections.lexical.last_applied(key)
        return found

    def _vector_mark(self, key: str) -> int | None:
        """None for a marker not read yet while a build holds the vector index (reading it
        would wait for the build)."""
        found = self._vector.get(key)
        if found is None:
            try:
                found = self._vector[key] = self.projections.vectors.last_applied(key)
            except VectorIndexBusy:
                return None
        return found

    # -- the work -------------------------------------------------------------------------

    def _loop(self) -> None:
        thread_priority.lower_current_thread(self.settings.nice)
        while not self._stop.is_set():
            self._wake.wait(self.settings.poll_seconds)
            self._wake.clear()
            if self._stop.is_set():
                return
            try:
                applied = self.run_once()
                self._maybe_optimize(applied)
                if applied and self.settings.coalesce_seconds:
                    self._hurry.wait(self.settings.coalesce_seconds)
                self._hurry.clear()
            except Exception:
                log.exception("indexing failed; retrying")
                self._stop.wait(self.settings.retry_seconds)

    def run_once(self) -> int:
        """Finds where the log grew and applies it all; returns the records applied."""
        now = time.monotonic()
        full = now - self._last_full_scan >= self.settings.full_scan_seconds
        since = 0 if full else max(0, self._watermark - TAIL_SLACK_US)
        changed = self.store.reader().changed_streams(since)
        if full:
            self._last_full_scan = now
        self.track(changed)
        for stream in changed:
            self._watermark = max(self._watermark, stream.last_time)
        return self.drain()

    def drain(self, progress: Callable[[int], None] | None = None) -> int:
        """Applies every known stream up to the size last read; returns records applied."""
        total = 0
        while not self._stop.is_set():
            with self._wanted_lock:
                wanted, self._wanted = self._wanted, {}
            self.track(wanted.values())
            work = self._behind(wanted)
            if not work:
                break
            try:
                total += self._apply(work)
            finally:  # a failing step still shows in the lag
                self._update_lag()
            if progress is not None:
                progress(total)
        self._update_lag(force=True)  # what a long quiet spell (a graph build) will show
        return total

    def track(self, streams: Iterable[Stream]) -> None:
        """Makes these streams known as read from the log (the larger size wins)."""
        for stream in streams:
            key = index_key(stream.tenant, stream.id)
            known = self._streams.get(key)
            if known is None or known.size <= stream.size:
                self._streams[key] = stream

    def forget_progress(self) -> None:
        """Drops what is known of the markers (after the indexes were reset)."""
        self._lexical.clear()
        self._vector.clear()

    def _behind(self, first: Mapping[str, Stream]) -> list[tuple[Stream, int, int]]:
        """(stream, first seq, last seq) for one batch, wanted streams first."""
        budget = self.settings.batch_records
        out = []
        order = [*first, *(k for k in self._streams if k not in first)]
        for key in order:
            stream = self._streams[key]
            done = self.applied(stream.tenant, stream.id)
            if stream.size <= done:
                continue
            last = min(stream.size, done + budget)
            out.append((stream, done + 1, last))
            budget -= last - done
            if budget <= 0:
                break
        return out

    def _apply(self, work: list[tuple[Stream, int, int]]) -> int:
        settings = self.projections.text
        with_vectors = self.projections.client_vectors is not None
        with self.store.snapshot() as reader:
            slices = [
                read_slice(reader, stream, first, last, settings, with_vectors)
                for stream, first, last in work
            ]
        batch = plan(slices, settings)
        # The build thread only ends, never starts, while this runs: a batch begun during a
        # build goes to the lexical lane alone, and is applied to both lanes later.
        both = not self.building
        done = self.projections.apply(batch, vectors=both)
        for key, seq in batch.marks.items():
            self._lexical[key] = seq
            if both:
                self._vector[key] = seq
        self._unoptimized += done.vectors
        if self.metrics is not None and done.vectors:
            self.metrics.vector_points_unoptimized.set(self._unoptimized)
        if self.metrics is not None and done.embedded:
            name = self.projections.embedder.name
            self.metrics.embedded_texts.labels(name).inc(done.embedded)
            self.metrics.embedding_seconds.labels(name).inc(done.embedding_seconds)
        for listener in self._listeners:
            listener()
        return sum(last - first + 1 for _, first, last in work)

    def _maybe_optimize(self, applied: int) -> None:
        """Starts the vector index's search-graph build when `should_optimize` says so: on
        the build thread, or on this one when the index holds the GIL while it builds."""
        vectors = self.projections.vectors
        optimize = getattr(vectors, "optimize", None)
        quiet = time.monotonic() - self._last_write
        if (
            optimize is None
            or self.building
            or time.monotonic() < self._next_build
            or not should_optimize(self.settings, self._unoptimized, applied, quiet)
        ):
            return
        if getattr(vectors, "holds_gil", False):
            self._optimize(optimize)
            return
        self._build = threading.Thread(
            target=self._optimize, args=(optimize,), name="cairn-graph-build", daemon=True
        )
        self._build.start()

    def _optimize(self, optimize: Callable[[], object]) -> None:
        """Builds the graph; the vector points it covers no longer count as unoptimized
        (nothing reaches the vector lane during a build on the build thread)."""
        points = self._unoptimized
        started = time.perf_counter()
        try:
            optimize()
        except Exception:
            log.exception("vector index build failed; retrying later")
            self._next_build = time.monotonic() + self.settings.retry_seconds
            return
        finally:
            self._wake.set()  # bring the vector lane up to the lexical one
        log.info(
            "vector index optimized",
            extra={"points": points, "seconds": round(time.perf_counter() - started, 2)},
        )
        self._unoptimized -= points
        if self.metrics is not None:
            self.metrics.vector_points_unoptimized.set(self._unoptimized)

    def _update_lag(self, force: bool = False) -> None:
        """Exports the lag: records behind, and the age of the oldest record not applied (at
        most once a second during a drain; `force` at its end)."""
        if self.metrics is None:
            return
        now = time.monotonic()
        if now - self._lag_checked < 1.0 and not force:
            return
        self._lag_checked = now
        reader = self.store.reader()
        wall = time.time()
        lanes: dict[str, Callable[[str], int | None]] = {
            "lexical": self._lexical_mark,
            "vector": self._vector_mark,
        }
        for name, mark in lanes.items():
            behind = 0
            oldest = wall
            for key, stream in self._streams.items():
                # A stream first seen during a build is new: none of it is in the vector lane.
                done = mark(key) or 0
                if stream.size > done:
                    behind += stream.size - done
                    pending = reader.record(stream, done + 1)
                    if pending is not None:
                        oldest = min(oldest, pending.created_at / 1_000_000)
            self.metrics.index_lag_records.labels(name).set(behind)
            self.metrics.index_lag_seconds.labels(name).set(max(0.0, wall - oldest))
