"""PostgreSQL connections and versioned migrations, shared by the fleet's stores."""

from __future__ import annotations

import contextlib
import re
import threading
import time
from importlib import resources
from typing import Any

import psycopg
from psycopg_pool import ConnectionPool

from cairn_server.sqlite import split_statements

_SCHEMA = re.compile(r"[a-z_][a-z0-9_]{0,62}")

# Errors after which a whole unit of work can simply run again.
RETRYABLE = (psycopg.errors.SerializationFailure, psycopg.errors.DeadlockDetected)


def check_schema(schema: str) -> str:
    """A schema name safe to put in SQL."""
    if not _SCHEMA.fullmatch(schema):
        raise ValueError(f"invalid PostgreSQL schema name {schema!r}")
    return schema


def open_pool(
    url: str, schema: str = "public", min_size: int = 1, max_size: int = 16
) -> ConnectionPool:
    """A connection pool whose connections use `schema` (created when missing)."""
    check_schema(schema)
    # Replicas starting together race here: IF NOT EXISTS does not stop two creations, and
    # the loser's duplicate means the schema is there.
    exists = (psycopg.errors.UniqueViolation, psycopg.errors.DuplicateSchema)
    with psycopg.connect(url, autocommit=True) as conn, contextlib.suppress(*exists):
        conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')
    pool = ConnectionPool(
        url,
        min_size=min_size,
        max_size=max_size,
        kwargs={"autocommit": True, "options": f"-c search_path={schema}"},
        # A connection the server dropped (a restart) is replaced instead of failing a call.
        check=ConnectionPool.check_connection,
        open=True,
    )
    pool.wait(timeout=30)
    return pool


class ThreadConnections:
    """One autocommit connection per reading thread, opened on first use: a read costs one
    round trip, with no pool checkout in front of it."""

    def __init__(self, url: str, schema: str) -> None:
        self._url = url
        self._schema = check_schema(schema)
        self._local = threading.local()
        self._all: list[Any] = []
        self._lock = threading.Lock()

    def get(self) -> Any:
        """This thread's connection (reopened if it broke)."""
        conn = getattr(self._local, "conn", None)
        if conn is None or conn.closed or conn.broken:
            conn = psycopg.connect(
                self._url, autocommit=True, options=f"-c search_path={self._schema}"
            )
            self._local.conn = conn
            with self._lock:
                self._all.append(conn)
        return conn

    def close(self) -> None:
        """Closes every thread's connection."""
        with self._lock:
            for conn in self._all:
                conn.close()
            self._all.clear()


def listen_connection(url: str, schema: str = "public") -> Any:
    """A dedicated autocommit connection for LISTEN."""
    return psycopg.connect(url, autocommit=True, options=f"-c search_path={check_schema(schema)}")


# Held while a component's migrations run; keyed by schema too, so fleets in other schemas
# of the database never wait on it.
MIGRATION_LOCK = (
    "SELECT pg_advisory_xact_lock("
    "hashtext('cairn:' || coalesce(current_schema(), '') || ':' || %s))"
)


def migrate(pool: ConnectionPool, component: str, package: str, folder: str) -> int:
    """Applies `package`'s `NNNN_name.sql` files for `component` that are not yet applied.

    All of it runs in one transaction under an advisory lock (per schema and component), so
    replicas starting together apply each migration once.
    """
    root = resources.files(package).joinpath(folder)
    files = sorted(
        (entry.name, entry.read_text("utf-8"))
        for entry in root.iterdir()
        if entry.name.endswith(".sql")
    )
    with pool.connection() as conn, conn.transaction():
        conn.execute(MIGRATION_LOCK, (component,))
        conn.execute(
            "CREATE TABLE IF NOT EXISTS schema_migrations (component TEXT NOT NULL,"
            " version INTEGER NOT NULL, name TEXT NOT NULL, applied_at DOUBLE PRECISION NOT NULL,"
            " PRIMARY KEY (component, version))"
        )
        applied = {
            row[0]
            for row in conn.execute(
                "SELECT version FROM schema_migrations WHERE component = %s", (component,)
            )
        }
        current = max(applied, default=0)
        for name, sql in files:
            version = int(name.split("_", 1)[0])
            if version in applied:
                continue
            for statement in split_statements(sql):
                conn.execute(statement.encode())
            conn.execute(
                "INSERT INTO schema_migrations (component, version, name, applied_at)"
                " VALUES (%s, %s, %s, %s)",
                (component, version, name, time.time()),
            )
            current = max(current, version)
    return current
