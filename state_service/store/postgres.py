"""The fleet's state store: PostgreSQL through a psycopg connection pool.

Queries are those of the SQLite store (`sql_reader`, `sql_writer`). Concurrency is carried
by the database: a transaction's reads lock the rows they return (`FOR UPDATE`), so two
replicas updating one block with the same expected version give one success and one
ABORTED; a deadlock or serialization failure aborts one transaction, which the runner runs
again. Events travel with the transaction as `NOTIFY`s and reach every replica's event hub
— this one's included — through a listening connection, only if the transaction commits.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict

from cairn_server import postgres
from cairn_server.postgres import ThreadConnections
from cairn_server.sqldb import PostgresDb
from state_service.models import AgentEvent, EventKind
from state_service.store.sql_reader import SqlReader
from state_service.store.sql_writer import SqlTx

CHANNEL = "cairn_state_events"
log = logging.getLogger("cairn.state.postgres")


def encode_event(event: AgentEvent) -> str:
    """An event as a NOTIFY payload."""
    return json.dumps(asdict(event), separators=(",", ":"))


def decode_event(payload: str) -> AgentEvent:
    """An event from a NOTIFY payload."""
    raw = json.loads(payload)
    raw["kind"] = EventKind(raw["kind"])
    return AgentEvent(**raw)


class PostgresStateStore:
    """State in PostgreSQL, shared by any number of state-service replicas."""

    retryable = postgres.RETRYABLE

    def __init__(
        self,
        url: str,
        publish: Callable[[list[AgentEvent]], None] | None = None,
        schema: str = "public",
        pool_size: int = 16,
    ) -> None:
        self._url = url
        self._schema = schema
        self._pool = postgres.open_pool(url, schema, max_size=pool_size)
        postgres.migrate(self._pool, "state", "state_service.store", "migrations/postgres")
        self._readers = ThreadConnections(url, schema)
        self._publish = publish
        self._stop = threading.Event()
        self._listener: threading.Thread | None = None
        if publish is not None:
            self.set_publisher(publish)

    def set_publisher(self, publish: Callable[[list[AgentEvent]], None]) -> None:
        """Starts delivering every replica's committed events to `publish`."""
        self._publish = publish
        if self._listener is None:
            ready = threading.Event()
            self._listener = threading.Thread(
                target=self._listen, args=(ready,), name="cairn-state-listen", daemon=True
            )
            self._listener.start()
            ready.wait(10)

    def _listen(self, ready: threading.Event) -> None:
        while not self._stop.is_set():
            try:
                with postgres.listen_connection(self._url, self._schema) as conn:
                    conn.execute(f"LISTEN {CHANNEL}")
                    ready.set()
                    while not self._stop.is_set():
                        for note in conn.notifies(timeout=0.5):
                            if self._publish is not None:
                                self._publish([decode_event(note.payload)])
            except Exception:
                if self._stop.is_set():
                    return
                log.exception("event listener lost its connection; reconnecting")
                self._stop.wait(1.0)

    def reader(self) -> SqlReader:
        """Queries on this thread's own autocommit connection."""
        return SqlReader(PostgresDb(self._readers.get()))

    @contextmanager
    def transaction(self) -> Iterator[SqlTx]:
        """A transaction on one pooled connection; events are NOTIFYs inside it."""
        with self._pool.connection() as conn, conn.transaction():
            tx = SqlTx(PostgresDb(conn))
            yield tx
            if tx.events:
                # One round trip for all of a transaction's events (a fan-out has hundreds).
                conn.execute(
                    "SELECT pg_notify(%s, payload) FROM unnest(%s::text[]) AS payload",
                    (CHANNEL, [encode_event(event) for event in tx.events]),
                )

    def close(self) -> None:
        """Stops listening and closes the pool."""
        self._stop.set()
        if self._listener is not None:
            self._listener.join(5)
        self._readers.close()
        self._pool.close()
