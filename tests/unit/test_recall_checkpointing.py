"""The embedded log's WAL folded into the database by a thread of the store, not by the
writer's commits: while it has not run, the pages the writes made live only in the WAL;
once it has, the database file holds every page; and a store without it keeps SQLite's own
checkpoints in its commits."""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path

from cairn_server.auth import Principal, Role
from recall_service import streams, writes
from recall_service.core import Deps
from recall_service.models import StreamKind
from recall_service.signing import load_or_create
from recall_service.store.sqlite import LOG_FILE, WAL_LIMIT_BYTES, SqliteLogStore

ALICE = Principal("acme", "alice", Role.AGENT)


def fill(store: SqliteLogStore, data_dir: Path, n: int) -> None:
    """`n` messages in one stream."""
    deps = Deps(store=store, signer=load_or_create(data_dir))
    stream, _, _ = streams.create_stream(deps, ALICE, "", StreamKind.CONVERSATION, "")
    for i in range(n):
        writes.write(deps, ALICE, stream.id, [writes.Entry(f"message {i} " * 20)], batch=False)


def pages(path: Path) -> tuple[int, int]:
    """(pages the database has, pages its file holds) — equal once the WAL is folded in."""
    with sqlite3.connect(path) as conn:
        count = conn.execute("PRAGMA page_count").fetchone()[0]
        size = conn.execute("PRAGMA page_size").fetchone()[0]
    return count, path.stat().st_size // size


def pragma(store: SqliteLogStore, name: str) -> int:
    """A pragma of the store's writer connection."""
    with store.transaction() as tx:
        return int(tx._c.execute(f"PRAGMA {name}").fetchone()[0])


def test_the_commits_leave_the_wal_to_the_checkpoint_thread(tmp_path: Path) -> None:
    store = SqliteLogStore(tmp_path, checkpoint_seconds=3600)  # it will not run in this test
    try:
        assert pragma(store, "wal_autocheckpoint") == 0
        assert pragma(store, "journal_size_limit") == WAL_LIMIT_BYTES
        fill(store, tmp_path, 300)
        total, in_file = pages(tmp_path / LOG_FILE)
        # ~2,500 WAL frames written, none folded in: the file has (nearly) nothing.
        assert in_file < total // 4
    finally:
        store.close()


def test_the_checkpoint_thread_folds_the_wal_into_the_database(tmp_path: Path) -> None:
    store = SqliteLogStore(tmp_path, checkpoint_seconds=0.2)
    try:
        fill(store, tmp_path, 300)
        total, _ = pages(tmp_path / LOG_FILE)
        deadline = time.monotonic() + 10
        while pages(tmp_path / LOG_FILE) != (total, total):
            assert time.monotonic() < deadline, "the WAL was not folded in"
            time.sleep(0.05)
    finally:
        store.close()


def test_without_the_thread_the_commits_checkpoint_as_sqlite_does(tmp_path: Path) -> None:
    store = SqliteLogStore(tmp_path)
    try:
        assert pragma(store, "wal_autocheckpoint") == 1000
        assert "cairn-wal-checkpoint" not in [t.name for t in threading.enumerate()]
        fill(store, tmp_path, 300)
        total, in_file = pages(tmp_path / LOG_FILE)
        assert in_file > total // 2  # the commit that passed 1,000 frames folded them in
    finally:
        store.close()
