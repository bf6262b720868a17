"""Helpers for integration tests: keys in a data directory, server processes."""

from __future__ import annotations

from pathlib import Path

from cairn_server.auth import Role, create_key
from cairn_server.keys_postgres import PostgresKeyStore
from cairn_server.keys_sqlite import SqliteKeyStore
from cairn_server.process import ServerProcess, free_port

__all__ = ["ServerProcess", "free_port", "key_store", "make_key"]


def key_store(target: Path | ServerProcess) -> SqliteKeyStore | PostgresKeyStore:
    """The key store a server reads: its PostgreSQL database when it runs with
    --database-url, else its data directory's keys.sqlite3. Close it after use."""
    if isinstance(target, ServerProcess) and "--database-url" in target.args:
        url = target.args[target.args.index("--database-url") + 1]
        schema = target.args[target.args.index("--database-schema") + 1]
        return PostgresKeyStore(url, schema)
    return SqliteKeyStore(target if isinstance(target, Path) else target.data_dir)


def make_key(
    target: Path | ServerProcess, tenant: str, role: Role | str = Role.ADMIN, subject: str = ""
) -> str:
    """Creates an API key where the server reads keys (see `key_store`)."""
    store = key_store(target)
    try:
        key, _ = create_key(store, tenant, role, subject or None)
    finally:
        store.close()
    return key
