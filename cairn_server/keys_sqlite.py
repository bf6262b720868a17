"""The embedded key store: `keys.sqlite3` in the data directory, shared by both services."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

from cairn_server import sqlite
from cairn_server.auth import KeyRecord, Role

KEYS_FILE = "keys.sqlite3"


class SqliteKeyStore:
    """API key hashes in SQLite."""

    def __init__(self, data_dir: Path) -> None:
        data_dir.mkdir(parents=True, exist_ok=True)
        self._conn = sqlite.connect(data_dir / KEYS_FILE)
        self._lock = threading.Lock()
        sqlite.migrate(self._conn, "cairn_server")

    def close(self) -> None:
        """Closes the connection."""
        self._conn.close()

    def add_key(self, record: KeyRecord) -> None:
        """Stores a new key record."""
        with self._lock:
            self._conn.execute(
                "INSERT INTO api_keys (key_id, key_hash, tenant, subject, role, created_at)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                (
                    record.key_id,
                    record.key_hash,
                    record.tenant,
                    record.subject,
                    record.role.value,
                    record.created_at,
                ),
            )

    def find_by_hash(self, key_hash: str) -> KeyRecord | None:
        """Returns the key with this hash, revoked or not."""
        with self._lock:
            row = self._conn.execute(
                "SELECT * FROM api_keys WHERE key_hash = ?", (key_hash,)
            ).fetchone()
        return None if row is None else _record(row)

    def list_keys(self, tenant: str | None) -> list[KeyRecord]:
        """Lists keys, optionally of one tenant, oldest first."""
        with self._lock:
            if tenant is None:
                rows = self._conn.execute("SELECT * FROM api_keys ORDER BY created_at").fetchall()
            else:
                rows = self._conn.execute(
                    "SELECT * FROM api_keys WHERE tenant = ? ORDER BY created_at", (tenant,)
                ).fetchall()
        return [_record(row) for row in rows]

    def revoke(self, key_id: str, when: float) -> bool:
        """Marks the key revoked; False when no such active key exists."""
        with self._lock:
            cur = self._conn.execute(
                "UPDATE api_keys SET revoked_at = ? WHERE key_id = ? AND revoked_at IS NULL",
                (when, key_id),
            )
        return cur.rowcount == 1


def _record(row: sqlite3.Row | tuple[object, ...]) -> KeyRecord:
    key_id, key_hash, tenant, subject, role, created_at, revoked_at = row
    return KeyRecord(
        key_id=str(key_id),
        key_hash=str(key_hash),
        tenant=str(tenant),
        subject=str(subject),
        role=Role(str(role)),
        created_at=float(created_at),  # type: ignore[arg-type]
        revoked_at=None if revoked_at is None else float(revoked_at),  # type: ignore[arg-type]
    )
