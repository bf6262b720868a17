"""Qdrant Edge in a child process (`EdgeWorkerIndex`): the same answers as the shard in this
process; a search-graph build that no longer stops this process (and that did, inline); a
search during the build refused at once, and a HYBRID search answered by the lexical lane;
a child that dies is replaced without losing what it acknowledged; a child that dies with
its parent."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from cairn_server.errors import FailedPrecondition, Unavailable
from cairn_server.metrics import Metrics
from recall_service.indexer import Indexer, IndexerSettings
from recall_service.projection_set import Projections
from recall_service.projections.conflicts import ConflictSettings
from recall_service.projections.documents import IndexedRecord
from recall_service.projections.embedders import WordLlamaEmbedder
from recall_service.projections.filters import SearchFilter
from recall_service.projections.hits import LaneHit
from recall_service.projections.lexical import LexicalIndex
from recall_service.projections.vector_worker import EdgeWorkerIndex, VectorIndexBusy
from recall_service.projections.vectors import QdrantEdgeIndex, VectorIndex
from recall_service.search import Answer, run
from recall_service.search_query import SearchMode, SearchQuery
from recall_service.search_scope import Scope
from recall_service.store.sqlite import SqliteLogStore
from tests.integration.test_search_indexer import fill as fill_log
from tests.integration.test_search_indexer import wait_for

DIM = 256


def records(stream: str, first: int, n: int) -> list[IndexedRecord]:
    return [
        IndexedRecord("acme", stream, seq, f"a{seq % 3}", 1_000.0 + seq, f"text {seq}", ("t",))
        for seq in range(first, first + n)
    ]


def vectors(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, DIM)).astype(np.float32)


@pytest.fixture
def worker(tmp_path: Path) -> Iterator[EdgeWorkerIndex]:
    index = EdgeWorkerIndex(tmp_path / "vectors", DIM)
    yield index
    index.close()


def fill(index: VectorIndex, n: int, stream: str = "s1", seed: int = 1) -> None:
    for start in range(0, n, 1000):
        count = min(1000, n - start)
        index.upsert(records(stream, start + 1, count), vectors(count, seed + start), {})
    index.upsert([], np.zeros((0, DIM), dtype=np.float32), {stream: n})


def test_the_worker_answers_as_the_shard_in_this_process_does(
    tmp_path: Path, worker: EdgeWorkerIndex
) -> None:
    inline = QdrantEdgeIndex(tmp_path / "inline", DIM)
    for index in (inline, worker):
        index.upsert(records("s1", 1, 40), vectors(40, 1), {"s1": 40})
        index.upsert(records("s2", 1, 10), vectors(10, 2), {"s2": 10})
        index.delete("s1", [3, 4], {"s1": 41})
    query = vectors(1, 3)[0]
    both = SearchFilter("acme", ("s1", "s2"))
    by_author = SearchFilter("acme", ("s1",), authors=("a1",))
    assert worker.search(query, 5, both) == inline.search(query, 5, both)
    assert worker.search(query, 50, by_author) == inline.search(query, 50, by_author)
    assert len(worker.search(query, 50, by_author)) == 13  # seqs 1..40 minus 4, seq % 3 == 1
    assert worker.count(both) == inline.count(both) == 48
    assert worker.search(query, 0, both) == []
    assert (worker.last_applied("s1"), worker.last_applied("s2")) == (41, 10)
    assert worker.last_applied("nothing") == 0
    worker.reset()
    assert worker.count(both) == 0 and worker.last_applied("s1") == 0
    inline.close()


def test_the_worker_is_refused_for_a_shard_of_another_dimension(tmp_path: Path) -> None:
    QdrantEdgeIndex(tmp_path / "vectors", 64).close()
    with pytest.raises(FailedPrecondition, match="holds 64-dim vectors, not 256"):
        EdgeWorkerIndex(tmp_path / "vectors", DIM)


def test_a_graph_build_in_the_worker_leaves_this_process_running(
    worker: EdgeWorkerIndex,
) -> None:
    fill(worker, 300)
    child = worker._proc
    assert child is not None
    os.kill(child.pid, signal.SIGSTOP)  # the build lasts until SIGCONT, on any machine
    builder = threading.Thread(target=worker.optimize)
    stalls = Ticker()
    with stalls:
        builder.start()
        while not worker.building:
            time.sleep(0.001)
        refused_in = time.perf_counter()
        with pytest.raises(VectorIndexBusy, match="building its search graph"):
            worker.search(vectors(1, 9)[0], 10, SearchFilter("acme", ("s1",)))
        refused_in = time.perf_counter() - refused_in
        time.sleep(1.0)
        assert worker.building
        os.kill(child.pid, signal.SIGCONT)
        builder.join(30)
    assert not worker.building
    assert stalls.longest < 0.5
    assert refused_in < 0.2
    found = worker.search(vectors(1, 9)[0], 10, SearchFilter("acme", ("s1",)))
    assert len(found) == 10


def thread_nices(pid: int) -> list[int]:
    """The nice value of each thread of a process, from /proc (field 19 of each stat)."""
    nices = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            stat = (task / "stat").read_text()
        except OSError:  # the thread ended meanwhile
            continue
        nices.append(int(stat.rpartition(")")[2].split()[16]))
    return nices


EDGE_BUILD_NICE = 9  # what Qdrant Edge sets its own search-graph build threads to


@pytest.mark.skipif(sys.platform != "linux", reason="threads have nice values on Linux")
def test_edge_builds_its_search_graph_on_threads_at_nice_9(worker: EdgeWorkerIndex) -> None:
    """Qdrant Edge lowers its own graph-build threads to nice 9 while the thread answering
    calls keeps the process's value (what `--index-nice 9` puts the indexer beside)."""
    if os.getpriority(os.PRIO_PROCESS, 0) != 0:
        pytest.skip("this process does not run at nice 0")
    fill(worker, 12_000)  # enough points for a real build (about a second or more)
    child = worker._proc
    assert child is not None
    seen: set[int] = set()
    builder = threading.Thread(target=worker.optimize)
    builder.start()
    while builder.is_alive():
        seen.update(thread_nices(child.pid))
        time.sleep(0.002)
    builder.join()
    assert seen == {0, EDGE_BUILD_NICE}
    assert worker.count(SearchFilter("acme", ("s1",))) == 12_000


def test_the_same_build_inline_stops_every_thread_of_the_process(tmp_path: Path) -> None:
    """Why the worker exists: measured the same way, the shard in this process holds the
    GIL through the whole build."""
    inline = QdrantEdgeIndex(tmp_path / "vectors", DIM)
    fill(inline, 12_000)
    stalls = Ticker()
    with stalls:
        started = time.perf_counter()
        assert inline.optimize() is True  # a real build: 12k points pass Edge's threshold
        build_s = time.perf_counter() - started
    inline.close()
    assert stalls.longest > 0.8 * build_s, (stalls.longest, build_s)


def test_a_dead_worker_is_replaced_and_keeps_what_it_acknowledged(
    worker: EdgeWorkerIndex,
) -> None:
    fill(worker, 300)
    child = worker._proc
    assert child is not None
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    everything = SearchFilter("acme", ("s1",))
    assert worker.count(everything) == 300  # a new child, the shard recovered from its WAL
    assert worker._proc is not None and worker._proc.pid != child.pid
    worker._marks.clear()
    assert worker.last_applied("s1") == 300


def test_a_worker_killed_during_a_call_fails_that_call_only(worker: EdgeWorkerIndex) -> None:
    fill(worker, 300)
    child = worker._proc
    assert child is not None
    os.kill(child.pid, signal.SIGSTOP)  # the call below cannot finish before the kill
    failures: list[BaseException] = []

    def build() -> None:
        try:
            worker.optimize()
        except BaseException as error:
            failures.append(error)

    builder = threading.Thread(target=build)
    builder.start()
    while not worker.building:
        time.sleep(0.001)
    time.sleep(0.2)  # the request is on the socket
    os.kill(child.pid, signal.SIGKILL)
    builder.join(10)
    assert len(failures) == 1 and isinstance(failures[0], Unavailable)
    assert "exited during 'optimize'" in str(failures[0])
    assert worker.building is False
    assert worker.count(SearchFilter("acme", ("s1",))) == 300


CHILD = """
import sys, time
from pathlib import Path
from recall_service.projections.vector_worker import EdgeWorkerIndex
index = EdgeWorkerIndex(Path(sys.argv[1]), 256)
print(index._proc.pid, flush=True)
time.sleep(600)
"""


def test_the_worker_dies_with_its_server(tmp_path: Path) -> None:
    server = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(tmp_path / "vectors")],
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert server.stdout is not None
    pid = int(server.stdout.readline())
    server.kill()  # kill -9: no shutdown code runs
    server.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and _alive(pid):
        time.sleep(0.05)
    assert not _alive(pid)
    reopened = EdgeWorkerIndex(tmp_path / "vectors", DIM)  # the shard's lock is free
    reopened.close()


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


class BusyVectors:
    """A vector index in the middle of a search-graph build."""

    dim = 256

    def search(self, vector: object, top_k: int, flt: SearchFilter) -> list[LaneHit]:
        raise VectorIndexBusy("the vector index is building its search graph")


def test_a_hybrid_search_during_a_build_is_answered_by_the_lexical_lane(
    tmp_path: Path,
) -> None:
    store = SqliteLogStore(tmp_path / "log")
    fill_log(store, tmp_path, "a", 20)
    lexical = LexicalIndex(tmp_path / "lexical")
    embedder = WordLlamaEmbedder()
    inline = QdrantEdgeIndex(tmp_path / "vectors", embedder.dim)
    Indexer(store, Projections(lexical, inline, embedder)).run_once()
    busy = Projections(lexical, BusyVectors(), embedder)  # type: ignore[arg-type]
    scope = Scope(tuple(store.reader().changed_streams(0)), {})

    def search(projections: Projections, mode: SearchMode) -> Answer:
        query = SearchQuery("garden", mode=mode, top_k=5)
        return run(projections, store, scope, query, "acme", ConflictSettings())

    answered = search(busy, SearchMode.HYBRID)
    alone = search(busy, SearchMode.LEXICAL)
    assert answered.vector_lane_skipped is True
    assert [h.record.seq for h in answered.hits] == [h.record.seq for h in alone.hits]
    assert len(answered.hits) == 5
    assert all(h.vector_rank is None and h.lexical_rank is not None for h in answered.hits)
    assert (
        search(Projections(lexical, inline, embedder), SearchMode.HYBRID).vector_lane_skipped
        is False
    )
    with pytest.raises(VectorIndexBusy):
        search(busy, SearchMode.VECTOR)
    inline.close()
    lexical.close()
    store.close()


def test_the_lexical_lane_keeps_indexing_during_a_graph_build(tmp_path: Path) -> None:
    """A build on the build thread, held open by a stopped worker: records written meanwhile
    reach the lexical lane (a HYBRID search finds them; `applied` is the lexical marker) and
    not the vector lane (its lag shows them); once the build ends the vector lane catches up
    and the count of unoptimized points covers exactly those records."""
    store = SqliteLogStore(tmp_path / "log")
    fill_log(store, tmp_path, "a", 20)
    embedder = WordLlamaEmbedder()
    worker = EdgeWorkerIndex(tmp_path / "vectors", DIM)
    projections = Projections(LexicalIndex(tmp_path / "lexical"), worker, embedder)
    metrics = Metrics("recall")
    settings = IndexerSettings(optimize_after=20, optimize_idle_seconds=0.0, poll_seconds=0.05)
    indexer = Indexer(store, projections, settings, metrics)
    assert indexer.run_once() == 21  # the owner's attach and 20 messages
    child = worker._proc
    assert child is not None
    os.kill(child.pid, signal.SIGSTOP)  # the build lasts until SIGCONT, on any machine
    indexer.start()
    try:
        wait_for(lambda: indexer.building, "a build to start")
        fill_log(store, tmp_path, "a", 5, start=20)
        wait_for(lambda: indexer.applied("acme", "a") == 26, "the lexical lane to reach 26")
        lag = metrics.registry.get_sample_value
        wait_for(
            lambda: lag("cairn_index_lag_records", {"projection": "vector"}) == 5.0,
            "the vector lag gauge to show the 5 records",
        )
        assert lag("cairn_index_lag_records", {"projection": "lexical"}) == 0.0
        assert worker.building
        scope = Scope(tuple(store.reader().changed_streams(0)), {})
        query = SearchQuery("token23", mode=SearchMode.HYBRID, top_k=3)
        answer = run(projections, store, scope, query, "acme", ConflictSettings())
        assert answer.vector_lane_skipped is True
        assert [h.record.seq for h in answer.hits][:1] == [25]  # token23 is the 24th message
        os.kill(child.pid, signal.SIGCONT)
        wait_for(lambda: not indexer.building, "the build to end")
        wait_for(
            lambda: lag("cairn_index_lag_records", {"projection": "vector"}) == 0.0,
            "the vector lane to catch up",
        )
        assert indexer.applied("acme", "a") == 26
        # The 5 new records and the 2 before them whose context they changed.
        assert lag("cairn_vector_points_unoptimized") == 7.0
        vector = run(
            projections,
            store,
            scope,
            SearchQuery("token23", mode=SearchMode.VECTOR, top_k=50),
            "acme",
            ConflictSettings(),
        )
        assert sorted(h.record.seq for h in vector.hits) == list(range(2, 27))
    finally:
        os.kill(child.pid, signal.SIGCONT)
        indexer.stop()
    projections.close()
    store.close()


class FailingLexical:
    """A lexical index whose search fails."""

    def search(self, text: str, top_k: int, flt: SearchFilter) -> list[LaneHit]:
        raise RuntimeError("the lexical lane failed")


def test_a_hybrid_search_through_the_worker_overlaps_its_lanes_and_frees_the_worker(
    tmp_path: Path,
) -> None:
    """The worker takes the query before the lexical lane runs and is read after it: the
    hits are those of the shard in this process, and a failing lexical lane still reads the
    worker's reply, so the next call reaches the worker."""
    store = SqliteLogStore(tmp_path / "log")
    fill_log(store, tmp_path, "a", 20)
    embedder = WordLlamaEmbedder()
    inline = Projections(
        LexicalIndex(tmp_path / "lexical1"), QdrantEdgeIndex(tmp_path / "v1", DIM), embedder
    )
    worker = EdgeWorkerIndex(tmp_path / "v2", DIM)
    split = Projections(LexicalIndex(tmp_path / "lexical2"), worker, embedder)
    for projections in (inline, split):
        Indexer(store, projections).run_once()
    scope = Scope(tuple(store.reader().changed_streams(0)), {})
    query = SearchQuery("garden violin", mode=SearchMode.HYBRID, top_k=8)

    def ranked(projections: Projections) -> list[tuple[int, int | None, int | None]]:
        answer = run(projections, store, scope, query, "acme", ConflictSettings())
        return [(h.record.seq, h.lexical_rank, h.vector_rank) for h in answer.hits]

    expected = ranked(inline)
    assert len(expected) == 8
    assert any(vector is not None for _, _, vector in expected)
    assert ranked(split) == expected
    failing = Projections(FailingLexical(), worker, embedder)  # type: ignore[arg-type]
    with pytest.raises(RuntimeError, match="the lexical lane failed"):
        ranked(failing)
    after = threading.Thread(target=lambda: worker.count(SearchFilter("acme", ("a",))), daemon=True)
    after.start()
    after.join(timeout=10)
    assert not after.is_alive(), "the worker's socket was left taken"
    assert ranked(split) == expected
    for projections in (inline, split):
        projections.close()
    store.close()


class Ticker:
    """The longest gap between the wake-ups of a thread that sleeps 10 ms at a time."""

    def __init__(self) -> None:
        self.longest = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run)

    def _run(self) -> None:
        last = time.perf_counter()
        while not self._stop.is_set():
            time.sleep(0.01)
            now = time.perf_counter()
            self.longest = max(self.longest, now - last)
            last = now

    def __enter__(self) -> Ticker:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
