"""The embedded log store: `recall.sqlite3` in WAL mode, one writer, a reader per thread.

SQLite has one writer, so `append` takes the database's write lock (BEGIN IMMEDIATE): appends
to one stream are serialized, and so are appends to different streams, by SQLite itself and
nothing more. `secure_delete` is on so that a redaction overwrites the erased content on disk.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from cairn_server import sqlite as sqlite_util
from cairn_server.sqldb import SqliteDb
from recall_service.models import Record, Stream
from recall_service.store.sql_reader import SqlLogReader
from recall_service.store.sql_writer import SqlLogTx

LOG_FILE = "recall.sqlite3"
# The WAL file's size after it restarts, when the writer's commits do not checkpoint it.
WAL_LIMIT_BYTES = 64 * 1024 * 1024
log = logging.getLogger("cairn.recall.store")

# SQLite's planner passes over the time index for the overlap self-join unless told.
TIME_INDEX = " INDEXED BY records_by_time"


class SqliteLogStore:
    """The log in `recall.sqlite3`. Writes are serialized on one connection; each reading
    thread has its own read-only connection, so reads never wait for a writer (WAL).

    `on_append` is called with the records of each unit of work once they are durable: after
    its COMMIT, or inside `group()` after the group's COMMIT (never for a unit rolled back).
    """

    def __init__(
        self,
        data_dir: Path,
        on_append: Callable[[Sequence[Record]], None] | None = None,
        checkpoint_seconds: float | None = None,
    ) -> None:
        data_dir.mkdir(parents=True, exist_ok=True)
        self.path = data_dir / LOG_FILE
        self._writer = sqlite_util.connect(self.path)
        self._writer.execute("PRAGMA secure_delete=ON")
        sqlite_util.migrate(self._writer, "recall_service.store")
        self._checkpointer: threading.Thread | None = None
        self._closing = threading.Event()
        if checkpoint_seconds:
            # The writer's commits stop folding the WAL into the database (SQLite does it
            # by default in the commit that passes 1,000 pages, every ~0.1 s at 2,000 writes/s
            # over 100 streams); a thread does it every `checkpoint_seconds` instead, on its
            # own connection, while the writer goes on. The WAL file is cut back to
            # WAL_LIMIT_BYTES when it restarts.
            self._writer.execute("PRAGMA wal_autocheckpoint=0")
            self._writer.execute(f"PRAGMA journal_size_limit={WAL_LIMIT_BYTES}")
            self._checkpointer = threading.Thread(
                target=self._checkpoint_every,
                args=(checkpoint_seconds,),
                name="cairn-wal-checkpoint",
                daemon=True,
            )
            self._checkpointer.start()
        self._write_lock = threading.RLock()
        self._grouped = False
        self._pending: list[Record] = []
        self._purge = False
        self._on_append = on_append
        self._local = threading.local()
        self._readers: list[sqlite3.Connection] = []
        self._readers_lock = threading.Lock()

    def _connection(self) -> sqlite3.Connection:
        """This thread's read-only connection."""
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._local.conn = sqlite_util.connect(self.path, read_only=True)
            with self._readers_lock:
                self._readers.append(conn)
        return conn

    def reader(self) -> SqlLogReader:
        """Queries on this thread's own connection."""
        reader: SqlLogReader | None = getattr(self._local, "reader", None)
        if reader is None:
            db = SqliteDb(self._connection())
            reader = self._local.reader = SqlLogReader(db, time_index=TIME_INDEX)
        return reader

    @contextmanager
    def snapshot(self) -> Iterator[SqlLogReader]:
        """Queries that all see one committed state: a read transaction on this thread's
        connection (WAL fixes its snapshot at the first read)."""
        conn = self._connection()
        if conn.in_transaction:  # a snapshot inside a snapshot: the outer one holds
            yield self.reader()
            return
        conn.execute("BEGIN")
        try:
            yield self.reader()
        finally:
            conn.execute("COMMIT")

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
                self._pending = []
                self._writer.execute("ROLLBACK")
                raise
            self._grouped = False
            appended, self._pending = self._pending, []
            try:
                self._writer.execute("COMMIT")
            except BaseException:
                if self._writer.in_transaction:
                    self._writer.execute("ROLLBACK")
                raise
        self._report(appended)
        self._purge_if_requested()

    @contextmanager
    def transaction(self) -> Iterator[SqlLogTx]:
        """BEGIN IMMEDIATE on the writer connection (a savepoint inside `group()`)."""
        with self._write_lock:
            tx = SqlLogTx(SqliteDb(self._writer), time_index=TIME_INDEX)
            if self._grouped:
                self._writer.execute("SAVEPOINT unit")
                try:
                    yield tx
                except BaseException:
                    self._writer.execute("ROLLBACK TO unit")
                    self._writer.execute("RELEASE unit")
                    raise
                self._writer.execute("RELEASE unit")
                self._pending.extend(tx.appended)
                return
            self._writer.execute("BEGIN IMMEDIATE")
            try:
                yield tx
            except BaseException:
                self._writer.execute("ROLLBACK")
                raise
            self._writer.execute("COMMIT")
        self._report(tx.appended)
        self._purge_if_requested()

    @contextmanager
    def append(self, tenant: str, stream_id: str) -> Iterator[tuple[SqlLogTx, Stream | None]]:
        """A transaction holding SQLite's write lock, with the stream read inside it."""
        with self.transaction() as tx:
            yield tx, tx.lock_stream(tenant, stream_id)

    def _report(self, records: list[Record]) -> None:
        if records and self._on_append is not None:
            self._on_append(records)

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

    def _checkpoint_every(self, seconds: float) -> None:
        """Folds the WAL into the database every `seconds` (PASSIVE: never waits for the
        writer or the readers; frames a reader still needs are folded next time)."""
        conn = sqlite_util.connect(self.path)
        try:
            while not self._closing.wait(seconds):
                try:
                    conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
                except sqlite3.Error:
                    log.exception("WAL checkpoint failed; trying again later")
        finally:
            conn.close()

    def close(self) -> None:
        """Closes every connection."""
        self._closing.set()
        if self._checkpointer is not None:
            self._checkpointer.join()
        with self._readers_lock:
            for conn in self._readers:
                conn.close()
            self._readers.clear()
        with self._write_lock:
            self._writer.close()
