"""The embedded state store: SQLite in WAL mode, one writer, readers on their own connections."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from cairn_server import sqlite as sqlite_util
from cairn_server.sqldb import SqliteDb
from state_service.models import AgentEvent
from state_service.store.sql_reader import SqlReader
from state_service.store.sql_writer import SqlTx

STATE_FILE = "state.sqlite3"


class SqliteStateStore:
    """State in `state.sqlite3`. Writes are serialized on one connection; each reading
    thread has its own read-only connection, so reads never wait for a writer (WAL).

    Inside `batch()` (group commit), each `transaction()` is a savepoint of one shared
    transaction: a failing unit of work rolls back alone, and the batch commits — one fsync —
    when its last unit is done. Events publish only after that commit.
    """

    def __init__(
        self, data_dir: Path, publish: Callable[[list[AgentEvent]], None] | None = None
    ) -> None:
        data_dir.mkdir(parents=True, exist_ok=True)
        self._path = data_dir / STATE_FILE
        self._writer = sqlite_util.connect(self._path)
        sqlite_util.migrate(self._writer, "state_service.store")
        self._write_lock = threading.Lock()
        self._local = threading.local()
        self._readers: list[sqlite3.Connection] = []
        self._readers_lock = threading.Lock()
        self._publish = publish
        self._batch_events: list[AgentEvent] | None = None
        self._batch_thread: int | None = None
        self._savepoints = 0

    def set_publisher(self, publish: Callable[[list[AgentEvent]], None]) -> None:
        """Where committed events go (the server's event hub)."""
        self._publish = publish

    def _in_batch(self) -> bool:
        return self._batch_thread == threading.get_ident()

    def reader(self) -> SqlReader:
        """Queries on this thread's own connection (inside a batch: the batch's, so a unit
        of work reads what earlier units of the batch wrote)."""
        if self._in_batch():
            return SqlReader(SqliteDb(self._writer))
        reader: SqlReader | None = getattr(self._local, "reader", None)
        if reader is None:
            conn = sqlite_util.connect(self._path, read_only=True)
            with self._readers_lock:
                self._readers.append(conn)
            reader = self._local.reader = SqlReader(SqliteDb(conn))
        return reader

    @contextmanager
    def batch(self) -> Iterator[None]:
        """One transaction for many units of work (group commit)."""
        with self._write_lock:
            self._writer.execute("BEGIN IMMEDIATE")
            self._batch_events = []
            self._batch_thread = threading.get_ident()
            try:
                yield
            except BaseException:
                self._writer.execute("ROLLBACK")
                raise
            else:
                self._writer.execute("COMMIT")
            finally:
                events, self._batch_events = self._batch_events, None
                self._batch_thread = None
        if events and self._publish is not None:
            self._publish(events)

    @contextmanager
    def transaction(self) -> Iterator[SqlTx]:
        """A unit of work: BEGIN IMMEDIATE ... COMMIT, or a savepoint inside a batch."""
        if self._in_batch():
            self._savepoints += 1
            name = f"unit{self._savepoints}"
            tx = SqlTx(SqliteDb(self._writer))
            self._writer.execute(f"SAVEPOINT {name}")
            try:
                yield tx
            except BaseException:
                self._writer.execute(f"ROLLBACK TO {name}")
                self._writer.execute(f"RELEASE {name}")
                raise
            self._writer.execute(f"RELEASE {name}")
            assert self._batch_events is not None
            self._batch_events.extend(tx.events)
            return
        with self._write_lock:
            tx = SqlTx(SqliteDb(self._writer))
            self._writer.execute("BEGIN IMMEDIATE")
            try:
                yield tx
            except BaseException:
                self._writer.execute("ROLLBACK")
                raise
            self._writer.execute("COMMIT")
        if tx.events and self._publish is not None:
            self._publish(tx.events)

    def close(self) -> None:
        """Closes every connection."""
        with self._readers_lock:
            for conn in self._readers:
                conn.close()
            self._readers.clear()
        self._writer.close()
