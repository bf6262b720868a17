"""API key hashes in PostgreSQL, for a fleet whose replicas share one database."""

from __future__ import annotations

from typing import Any

from cairn_server import postgres
from cairn_server.auth import KeyRecord, Role


class PostgresKeyStore:
    """The `api_keys` table."""

    def __init__(self, url: str, schema: str = "public") -> None:
        self._pool = postgres.open_pool(url, schema, max_size=4)
        postgres.migrate(self._pool, "keys", "cairn_server", "migrations/postgres")

    def close(self) -> None:
        """Closes the pool."""
        self._pool.close()

    def add_key(self, record: KeyRecord) -> None:
        """Stores a new key record."""
        with self._pool.connection() as conn:
            conn.execute(
                "INSERT INTO api_keys (key_id, key_hash, tenant, subject, role, created_at)"
                " VALUES (%s, %s, %s, %s, %s, %s)",
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
        with self._pool.connection() as conn:
            row = conn.execute(
                "SELECT key_id, key_hash, tenant, subject, role, created_at, revoked_at"
                " FROM api_keys WHERE key_hash = %s",
                (key_hash,),
            ).fetchone()
        return None if row is None else _record(row)

    def list_keys(self, tenant: str | None) -> list[KeyRecord]:
        """Lists keys, optionally of one tenant, oldest first."""
        with self._pool.connection() as conn:
            rows = conn.execute(
                "SELECT key_id, key_hash, tenant, subject, role, created_at, revoked_at"
                " FROM api_keys WHERE %s::text IS NULL OR tenant = %s ORDER BY created_at",
                (tenant, tenant),
            ).fetchall()
        return [_record(row) for row in rows]

    def revoke(self, key_id: str, when: float) -> bool:
        """Marks the key revoked; False when no such active key exists."""
        with self._pool.connection() as conn:
            cursor = conn.execute(
                "UPDATE api_keys SET revoked_at = %s WHERE key_id = %s AND revoked_at IS NULL",
                (when, key_id),
            )
        return cursor.rowcount == 1


def _record(row: Any) -> KeyRecord:
    key_id, key_hash, tenant, subject, role, created_at, revoked_at = row
    return KeyRecord(
        key_id=key_id,
        key_hash=key_hash,
        tenant=tenant,
        subject=subject,
        role=Role(role),
        created_at=float(created_at),
        revoked_at=None if revoked_at is None else float(revoked_at),
    )
