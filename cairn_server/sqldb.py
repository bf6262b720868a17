"""One small interface over SQLite and PostgreSQL connections, so that a store's queries
are written once.

Queries use `?` placeholders (or `:name` with a mapping); the PostgreSQL side rewrites them
to psycopg's `%s` / `%(name)s`. `for_update` is the row-lock clause a transaction's reads
append: empty on SQLite, whose writer transaction already holds the database.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterable, Mapping, Sequence
from functools import lru_cache
from typing import Any, Protocol

Params = Sequence[Any] | Mapping[str, Any]


class Cursor(Protocol):
    """What queries return."""

    @property
    def rowcount(self) -> int:
        """Rows the statement changed."""

    def fetchone(self) -> Any:
        """The next row, or None."""

    def fetchall(self) -> list[Any]:
        """The remaining rows."""

    def __iter__(self) -> Any:
        """Iterates the rows."""


class Db(Protocol):
    """A connection, as the stores use it."""

    for_update: str

    def execute(self, sql: str, params: Params = ()) -> Cursor:
        """Runs one statement."""

    def executemany(self, sql: str, rows: Iterable[Params]) -> None:
        """Runs one statement for each row of parameters."""


class SqliteDb:
    """A sqlite3 connection."""

    for_update = ""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def execute(self, sql: str, params: Params = ()) -> Cursor:
        """Runs one statement."""
        return self.conn.execute(sql, params)

    def executemany(self, sql: str, rows: Iterable[Params]) -> None:
        """Runs one statement for each row of parameters."""
        self.conn.executemany(sql, rows)


_NAMED = re.compile(r"(?<![:\w]):([A-Za-z_]\w*)")


@lru_cache(maxsize=4096)
def to_psycopg(sql: str) -> bytes:
    """`?` and `:name` placeholders as psycopg's `%s` and `%(name)s` (as bytes, the query
    type psycopg takes for text built at run time)."""
    sql = sql.replace("%", "%%")
    return _NAMED.sub(r"%(\1)s", sql.replace("?", "%s")).encode()


class PostgresDb:
    """A psycopg connection."""

    for_update = " FOR UPDATE"

    def __init__(self, conn: Any) -> None:
        self.conn = conn

    def execute(self, sql: str, params: Params = ()) -> Cursor:
        """Runs one statement."""
        cursor: Cursor = self.conn.execute(to_psycopg(sql), params or None)
        return cursor

    def executemany(self, sql: str, rows: Iterable[Params]) -> None:
        """Runs one statement for each row of parameters."""
        batch = list(rows)
        if batch:
            with self.conn.cursor() as cursor:
                cursor.executemany(to_psycopg(sql), batch)


class _Rows:
    """Rows already fetched, with the cursor interface the stores use."""

    def __init__(self, rows: list[Any], rowcount: int) -> None:
        self._rows = rows
        self._index = 0
        self._rowcount = rowcount

    @property
    def rowcount(self) -> int:
        """Rows the statement changed."""
        return self._rowcount

    def fetchone(self) -> Any:
        """The next row, or None."""
        if self._index >= len(self._rows):
            return None
        row = self._rows[self._index]
        self._index += 1
        return row

    def fetchall(self) -> list[Any]:
        """The remaining rows."""
        rows = self._rows[self._index :]
        self._index = len(self._rows)
        return rows

    def __iter__(self) -> Any:
        return iter(self.fetchall())


class PooledDb:
    """Reads on a PostgreSQL pool: each statement borrows a connection for itself."""

    for_update = ""

    def __init__(self, pool: Any) -> None:
        self._pool = pool

    def execute(self, sql: str, params: Params = ()) -> Cursor:
        """Runs one statement and fetches its rows."""
        with self._pool.connection() as conn:
            cursor = conn.execute(to_psycopg(sql), params or None)
            rows = cursor.fetchall() if cursor.description is not None else []
            return _Rows(rows, cursor.rowcount)

    def executemany(self, sql: str, rows: Iterable[Params]) -> None:
        """Runs one statement for each row of parameters."""
        with self._pool.connection() as conn:
            PostgresDb(conn).executemany(sql, rows)
