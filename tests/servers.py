"""Helpers for integration tests: keys in a data directory, server processes."""

from __future__ import annotations

from pathlib import Path

from cairn_server.auth import Role, create_key
from cairn_server.keys_sqlite import SqliteKeyStore
from cairn_server.process import ServerProcess, free_port

__all__ = ["ServerProcess", "free_port", "make_key"]


def make_key(data_dir: Path, tenant: str, role: Role | str = Role.ADMIN, subject: str = "") -> str:
    """Creates an API key in the data directory's key store."""
    store = SqliteKeyStore(data_dir)
    try:
        key, _ = create_key(store, tenant, role, subject or None)
    finally:
        store.close()
    return key
