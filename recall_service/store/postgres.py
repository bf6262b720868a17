"""The fleet's log store: PostgreSQL through a psycopg connection pool.

Queries are those of the SQLite store (`sql_reader`, `sql_writer`). Concurrency is carried
by the database, not by this process: `append` locks the stream's row (`SELECT ... FOR
UPDATE`) in the appending transaction, so appends to one stream from any number of replicas
are serialized — each reads the head, the Merkle frontier, the participants and the
idempotency keys its predecessor committed — while appends to different streams run in
parallel. Transactions are READ COMMITTED: every statement after the lock sees everything
committed before it was granted. A deadlock or serialization failure aborts a unit of work
that wrote nothing; the runner runs it again (`retryable`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext

import psycopg

from cairn_server import postgres
from cairn_server.sqldb import PooledDb, PostgresDb
from recall_service.models import Record, Stream
from recall_service.store.sql_reader import SqlLogReader
from recall_service.store.sql_writer import SqlLogTx

log = logging.getLogger("cairn.recall.postgres")


class PostgresRecallStore:
    """The log in PostgreSQL, shared by any number of recall-service replicas.

    `on_append` is called with the records of each unit of work after its COMMIT.
    """

    retryable = postgres.RETRYABLE

    def __init__(
        self,
        url: str,
        schema: str = "public",
        pool_size: int = 16,
        on_append: Callable[[Sequence[Record]], None] | None = None,
    ) -> None:
        self._pool = postgres.open_pool(url, schema, max_size=pool_size)
        postgres.migrate(self._pool, "recall", "recall_service.store", "migrations/postgres")
        self._reader = SqlLogReader(PooledDb(self._pool))
        self._on_append = on_append

    def reader(self) -> SqlLogReader:
        """Queries; each statement borrows a pooled connection."""
        return self._reader

    @contextmanager
    def snapshot(self) -> Iterator[SqlLogReader]:
        """Queries in one REPEATABLE READ, READ ONLY transaction on one connection: they all
        see the state committed when the first of them ran."""
        with self._pool.connection() as conn, conn.transaction():
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            yield SqlLogReader(PostgresDb(conn))

    def group(self) -> AbstractContextManager[None]:
        """Units of work commit on their own here: a scope with nothing to add (the runner
        uses a thread pool, not group commit, with PostgreSQL)."""
        return nullcontext()

    @contextmanager
    def transaction(self) -> Iterator[SqlLogTx]:
        """A READ COMMITTED transaction on one pooled connection, in pipeline mode: the
        statements whose results nobody reads (the inserts, the head's update) are sent
        without waiting for each answer, so a stream's lock is held for fewer round trips.
        An error among them surfaces at the COMMIT, which then rolls everything back."""
        with self._pool.connection() as conn, conn.pipeline(), conn.transaction():
            tx = SqlLogTx(PostgresDb(conn))
            yield tx
        if tx.appended and self._on_append is not None:
            self._on_append(tx.appended)

    @contextmanager
    def append(self, tenant: str, stream_id: str) -> Iterator[tuple[SqlLogTx, Stream | None]]:
        """A transaction holding the stream row's lock, with the stream as locked."""
        with self.transaction() as tx:
            yield tx, tx.lock_stream(tenant, stream_id)

    def purge_erased(self) -> None:
        """VACUUMs the records table after a redaction has committed, so the row version
        that still held the erased content and salt is pruned from the table's pages.

        Best effort: a transaction older than the redaction that is still open anywhere
        keeps that version alive until a later (auto)vacuum. There is no WAL to truncate;
        PostgreSQL recycles WAL segments itself (docs/recall-service.md).
        """
        try:
            with self._pool.connection() as conn:
                conn.execute("VACUUM records")
        except psycopg.Error:
            # The redaction has committed; a failed vacuum leaves the old version to
            # autovacuum, and must not turn the redaction's answer into an error.
            log.warning("VACUUM after a redaction failed", exc_info=True)

    def close(self) -> None:
        """Closes the pool."""
        self._pool.close()
