"""The embedded log store: `recall.sqlite3` in WAL mode, one writer, a reader per thread.

SQLite has one writer, so `append` takes the database's write lock (BEGIN IMMEDIATE): appends
to one stream are serialized, and so are appends to different streams, by SQLite itself and
nothing more. `secure_delete` is on so that a redaction overwrites the erased content on disk.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from cairn_server import sqlite as sqlite_util
from recall_service.models import Stream
from recall_service.store.sqlite_reader import SqliteLogReader
from recall_service.store.sqlite_writer import SqliteLogTx

LOG_FILE = "recall.sqlite3"


class SqliteLogStore:
    """The log in `recall.sqlite3`. Writes are serialized on one connection; each reading
    thread has its own read-only connection, so reads never wait for a writer (WAL)."""

    def __init__(self, data_dir: Path) -> None:
        data_dir.mkdir(parents=True, exist_ok=True)
        self.path = data_dir / LOG_FILE
        self._writer = sqlite_util.connect(self.path)
        self._writer.execute("PRAGMA secure_delete=ON")
        sqlite_util.migrate(self._writer, "recall_service.store")
        self._write_lock = threading.RLock()
        self._grouped = False
        self._purge = False
        self._local = threading.local()
        self._readers: list[sqlite3.Connection] = []
        self._readers_lock = threading.Lock()

    def reader(self) -> SqliteLogReader:
        """Queries on this thread's own connection."""
        reader: SqliteLogReader | None = getattr(self._local, "reader", None)
        if reader is None:
            conn = sqlite_util.connect(self.path, read_only=True)
            with self._readers_lock:
                self._readers.append(conn)
            reader = self._local.reader = SqliteLogReader(conn)
        return reader

    @contextmanager
    def group(self) -> Iterator[None]:
        """One outer transaction for many units of work: inside it, `transaction()` and
        `append()` are savepoints, and the single COMMIT at the end makes them all durable
        with one fsync. Nothing inside is durable before this scope exits normally."""
        with self._write_lock:
            self._writer.execute("BEGIN IMMEDIATE")
            self._grouped = True
            try:
                yield
            except BaseException:
                self._grouped = False
                self._writer.execute("ROLLBACK")
                raise
            self._grouped = False
            try:
                self._writer.execute("COMMIT")
            except BaseException:
                if self._writer.in_transaction:
                    self._writer.execute("ROLLBACK")
                raise
        self._purge_if_requested()

    @contextmanager
    def transaction(self) -> Iterator[SqliteLogTx]:
        """BEGIN IMMEDIATE on the writer connection (a savepoint inside `group()`)."""
        with self._write_lock:
            tx = SqliteLogTx(self._writer)
            if self._grouped:
                self._writer.execute("SAVEPOINT unit")
                try:
                    yield tx
                except BaseException:
                    self._writer.execute("ROLLBACK TO unit")
                    self._writer.execute("RELEASE unit")
                    raise
                self._writer.execute("RELEASE unit")
                return
            self._writer.execute("BEGIN IMMEDIATE")
            try:
                yield tx
            except BaseException:
                self._writer.execute("ROLLBACK")
                raise
            self._writer.execute("COMMIT")
        self._purge_if_requested()

    @contextmanager
    def append(self, tenant: str, stream_id: str) -> Iterator[tuple[SqliteLogTx, Stream | None]]:
        """A transaction holding SQLite's write lock, with the stream read inside it."""
        with self.transaction() as tx:
            yield tx, tx.get_stream(tenant, stream_id)

    def purge_erased(self) -> None:
        """Folds the WAL into the database and truncates it once the current transaction
        commits, so content a redaction erased (overwritten in place: secure_delete) does
        not linger in WAL frames."""
        self._purge = True
        if not self._writer.in_transaction:
            self._purge_if_requested()

    def _purge_if_requested(self) -> None:
        with self._write_lock:
            if self._purge and not self._writer.in_transaction:
                self._purge = False
                self._writer.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    def close(self) -> None:
        """Closes every connection."""
        with self._readers_lock:
            for conn in self._readers:
                conn.close()
            self._readers.clear()
        with self._write_lock:
            self._writer.close()
