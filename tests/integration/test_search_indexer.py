"""The indexer against a real log store (SQLite and PostgreSQL) and real on-disk indexes:
a crash between the log's commit and the indexes' commit — simulated, and a real process
exit — then a restart: the indexes catch up, and no record is indexed twice; a rebuild from
the log alone gives the same search results."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from cairn_server.auth import Principal, Role
from cairn_server.metrics import Metrics
from recall_service import streams, writes
from recall_service.core import Deps
from recall_service.index_plan import index_key
from recall_service.indexer import Indexer, IndexerSettings
from recall_service.models import StreamKind
from recall_service.projection_set import Projections
from recall_service.projections.embedders import WordLlamaEmbedder
from recall_service.projections.filters import SearchFilter
from recall_service.projections.lexical import LexicalIndex
from recall_service.projections.vectors import QdrantEdgeIndex
from recall_service.reindex import rebuild
from recall_service.search import run
from recall_service.search_query import SearchMode, SearchQuery
from recall_service.search_scope import Scope
from recall_service.signing import load_or_create
from recall_service.store.base import LogStore
from recall_service.store.postgres import PostgresRecallStore
from recall_service.store.sqlite import SqliteLogStore

ADMIN = Principal("acme", "admin", Role.ADMIN)
TOPICS = ["garden", "harbour", "violin", "glacier", "lantern", "orchard", "compass", "meteor"]


@pytest.fixture(scope="module")
def embedder() -> WordLlamaEmbedder:
    return WordLlamaEmbedder()


@pytest.fixture(params=["sqlite", "postgres"])
def store_spec(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[list[str]]:
    """How to open the log: ["sqlite", dir] or ["postgres", url, schema]."""
    if request.param == "sqlite":
        yield ["sqlite", str(tmp_path / "log")]
        return
    url: str = request.getfixturevalue("postgres_url")
    schema = f"i_{uuid.uuid4().hex[:12]}"
    yield ["postgres", url, schema]
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'.encode())


def open_store(spec: list[str]) -> LogStore:
    if spec[0] == "sqlite":
        return SqliteLogStore(Path(spec[1]))
    return PostgresRecallStore(spec[1], spec[2], pool_size=2)


def open_projections(index_dir: Path, embedder: WordLlamaEmbedder) -> Projections:
    return Projections(
        LexicalIndex(index_dir / "lexical"),
        QdrantEdgeIndex(index_dir / "vectors", embedder.dim),
        embedder,
    )


def fill(store: LogStore, data_dir: Path, stream_id: str, n: int, start: int = 0) -> None:
    deps = Deps(store=store, signer=load_or_create(data_dir))
    if store.reader().get_stream("acme", stream_id) is None:
        streams.create_stream(deps, ADMIN, stream_id, StreamKind.CONVERSATION, "ana")
    entries = [
        writes.Entry(
            f"{stream_id} token{start + i} about the {TOPICS[(start + i) % len(TOPICS)]}"
            f" and the {TOPICS[(3 * (start + i) + len(stream_id)) % len(TOPICS)]}",
            "ana",
        )
        for i in range(n)
    ]
    writes.write(deps, ADMIN, stream_id, entries, batch=True)


def assert_complete(store: LogStore, projections: Projections, sizes: dict[str, int]) -> None:
    """Both lanes hold every message once and their markers are at the stream's end."""
    for stream_id, messages in sizes.items():
        stream = store.reader().get_stream("acme", stream_id)
        assert stream is not None
        key = index_key("acme", stream_id)
        assert projections.lexical.last_applied(key) == stream.size
        assert projections.vectors.last_applied(key) == stream.size
        everything = SearchFilter("acme", (key,))
        assert projections.lexical.count(everything) == messages
        assert projections.vectors.count(everything) == messages
    # Every record is found first by its own token, and no document is there twice.
    key = index_key("acme", "a")
    for i in range(0, sizes["a"], 7):
        hits = projections.lexical.search(f"token{i}", 10, SearchFilter("acme", (key,)))
        assert hits[0].key.seq == i + 2  # seq 1 is the owner's attach
        assert len({h.key for h in hits}) == len(hits)


def test_a_crash_between_the_vector_write_and_the_lexical_commit_is_caught_up_once(
    store_spec: list[str], tmp_path: Path, embedder: WordLlamaEmbedder
) -> None:
    store = open_store(store_spec)
    fill(store, tmp_path, "a", 40)
    fill(store, tmp_path, "b", 10)
    projections = open_projections(tmp_path / "index", embedder)
    calls = {"n": 0}
    original = projections.lexical.apply

    def crashing_apply(*args: Any) -> None:
        calls["n"] += 1
        if calls["n"] == 2:  # the vector lane of this batch is written; Tantivy never commits
            raise OSError("disk gone")
        original(*args)

    projections.lexical.apply = crashing_apply  # type: ignore[method-assign,assignment]
    indexer = Indexer(store, projections, IndexerSettings(batch_records=16))
    with pytest.raises(OSError, match="disk gone"):
        indexer.run_once()
    key = index_key("acme", "a")
    assert projections.lexical.last_applied(key) < projections.vectors.last_applied(key)
    projections.close()
    fill(store, tmp_path, "a", 10, start=40)  # the log goes on meanwhile

    reopened = open_projections(tmp_path / "index", embedder)
    Indexer(store, reopened, IndexerSettings(batch_records=16)).run_once()
    assert_complete(store, reopened, {"a": 50, "b": 10})
    reopened.close()
    store.close()


CHILD = """
import os, sys
from pathlib import Path
sys.path.insert(0, {root!r})
from tests.integration.test_search_indexer import open_projections, open_store
from recall_service.indexer import Indexer, IndexerSettings
from recall_service.projections.embedders import WordLlamaEmbedder
from recall_service.projections.lexical import LexicalIndex

commits = {{"n": 0}}
original = LexicalIndex.commit

def commit_then_die(self):
    commits["n"] += 1
    if commits["n"] == 3:
        os._exit(9)  # no cleanup, no flush: as a SIGKILL would leave it
    original(self)

LexicalIndex.commit = commit_then_die
store = open_store({spec!r})
projections = open_projections(Path({index!r}), WordLlamaEmbedder())
Indexer(store, projections, IndexerSettings(batch_records=12)).run_once()
"""


def test_a_process_killed_mid_indexing_resumes_from_its_markers(
    store_spec: list[str], tmp_path: Path, embedder: WordLlamaEmbedder
) -> None:
    store = open_store(store_spec)
    fill(store, tmp_path, "a", 60)
    fill(store, tmp_path, "b", 5)
    code = CHILD.format(root=str(Path.cwd()), spec=store_spec, index=str(tmp_path / "index"))
    child = subprocess.run(
        [sys.executable, "-c", code], check=False, capture_output=True, timeout=120
    )
    assert child.returncode == 9, child.stderr.decode()[-2000:]

    projections = open_projections(tmp_path / "index", embedder)
    key = index_key("acme", "a")
    assert 0 < projections.lexical.last_applied(key) < 61  # two batches committed, then died
    Indexer(store, projections).run_once()
    assert_complete(store, projections, {"a": 60, "b": 5})
    projections.close()
    store.close()


def searches(store: LogStore, projections: Projections, exact: bool) -> list[Any]:
    """Every hit of a few searches in each mode: in order with scores when `exact`, else the
    vector lane so and the others as the set of records found.

    Tantivy's BM25 statistics (document counts, lengths) include replaced documents until
    its segments merge, and incremental indexing replaces a record's document when its
    after-context grows: a rebuilt lexical index finds the same records with the same texts
    (`test_search_plan`), but scores them a little differently (here ~10%)."""
    found: list[Any] = []
    scope = Scope(tuple(store.reader().changed_streams(0)), {})
    for mode in SearchMode:
        for text in ("garden", "violin lantern", "token12", "the meteor compass"):
            query = SearchQuery(text, mode=mode, top_k=100)
            hits = run(projections, store, scope, query, "acme", _conflicts()).hits
            if exact or mode is SearchMode.VECTOR:
                found.append(
                    [(h.record.stream_id, h.record.seq, h.lexical_rank, h.vector_rank, h.score)
                     for h in hits]
                )  # fmt: skip
            else:
                found.append({(h.record.stream_id, h.record.seq) for h in hits})
    return found


def _conflicts() -> Any:
    from recall_service.projections.conflicts import ConflictSettings

    return ConflictSettings()


def test_a_rebuild_from_the_log_gives_the_same_results(
    store_spec: list[str], tmp_path: Path, embedder: WordLlamaEmbedder
) -> None:
    store = open_store(store_spec)
    fill(store, tmp_path, "a", 30)
    fill(store, tmp_path, "b", 20)
    projections = open_projections(tmp_path / "index", embedder)
    indexer = Indexer(store, projections, IndexerSettings(batch_records=7))
    indexer.run_once()
    fill(store, tmp_path, "a", 5, start=30)
    indexer.run_once()
    incremental = searches(store, projections, exact=False)
    assert all(incremental)  # every search found something to compare

    done = rebuild(store, projections)
    assert (done.streams, done.records) == (2, 36 + 21)
    assert searches(store, projections, exact=False) == incremental
    rebuilt = searches(store, projections, exact=True)

    assert rebuild(store, projections).records == 57
    assert searches(store, projections, exact=True) == rebuilt
    one = [s for s in store.reader().changed_streams(0) if s.id == "b"]
    again = rebuild(store, projections, one)
    assert (again.streams, again.records) == (1, 21)
    assert searches(store, projections, exact=False) == incremental
    assert_complete(store, projections, {"a": 35, "b": 20})
    projections.close()
    store.close()


def test_the_lag_gauges_read_zero_once_a_pass_has_caught_up(
    store_spec: list[str], tmp_path: Path, embedder: WordLlamaEmbedder
) -> None:
    """Mid-pass the gauges refresh at most once a second; the end of a pass always refreshes
    them, so a long quiet spell after it (a search-graph build) never shows a stale lag."""
    store = open_store(store_spec)
    fill(store, tmp_path, "a", 50)
    projections = open_projections(tmp_path / "index", embedder)
    metrics = Metrics("recall")
    indexer = Indexer(store, projections, IndexerSettings(batch_records=16), metrics)
    assert indexer.run_once() == 51  # the owner's attach and 50 messages
    for lane in ("lexical", "vector"):
        for name in ("cairn_index_lag_records", "cairn_index_lag_seconds"):
            assert metrics.registry.get_sample_value(name, {"projection": lane}) == 0.0
    projections.close()
    store.close()


def test_the_unoptimized_gauge_counts_vector_points_until_a_graph_build(
    store_spec: list[str], tmp_path: Path, embedder: WordLlamaEmbedder
) -> None:
    """`cairn_vector_points_unoptimized`: the points written since the last search-graph
    build (each of the 50 messages once: they arrive in one pass, so no neighbour is
    rewritten), back to 0 once the indexer has built the graph."""
    store = open_store(store_spec)
    fill(store, tmp_path, "a", 50)
    projections = open_projections(tmp_path / "index", embedder)
    metrics = Metrics("recall")
    settings = IndexerSettings(optimize_after=50, optimize_idle_seconds=0.0, poll_seconds=0.05)
    indexer = Indexer(store, projections, settings, metrics)
    assert indexer.run_once() == 51
    assert metrics.registry.get_sample_value("cairn_vector_points_unoptimized") == 50.0
    indexer.start()
    try:
        wait_for(
            lambda: metrics.registry.get_sample_value("cairn_vector_points_unoptimized") == 0.0,
            "a graph build",
        )
    finally:
        indexer.stop()
    projections.close()
    store.close()


def wait_for(condition: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    """Polls `condition` until it holds; fails naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"waited {timeout:.0f} s for {what}"
        time.sleep(0.02)


def test_the_indexer_thread_runs_at_a_lower_cpu_priority(
    store_spec: list[str], tmp_path: Path, embedder: WordLlamaEmbedder
) -> None:
    """The indexer's thread raises its own nice value by `IndexerSettings.nice` (Linux); the
    rest of the process keeps its own."""
    if sys.platform != "linux":
        pytest.skip("threads have nice values of their own on Linux only")
    base = os.getpriority(os.PRIO_PROCESS, 0)
    if base > 12:
        pytest.skip("this process already runs at a nice value above 12")
    store = open_store(store_spec)
    projections = open_projections(tmp_path / "index", embedder)
    indexer = Indexer(store, projections, IndexerSettings(nice=7, poll_seconds=0.05))
    indexer.start()
    try:
        thread = indexer._thread
        assert thread is not None and thread.native_id is not None
        wait_for(
            lambda: os.getpriority(os.PRIO_PROCESS, thread.native_id or 0) == base + 7,
            "the indexer thread's nice value",
        )
        assert os.getpriority(os.PRIO_PROCESS, 0) == base
    finally:
        indexer.stop()
    projections.close()
    store.close()
