"""Migrations on PostgreSQL: once per schema however many replicas start together, and a
migration in one schema never holds up another schema of the same database."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from importlib import resources

import psycopg
import pytest

from cairn_server import postgres


@pytest.fixture
def schemas(postgres_url: str) -> Iterator[list[str]]:
    names = [f"mig_{uuid.uuid4().hex[:10]}" for _ in range(2)]
    yield names
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        for name in names:
            conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE'.encode())


def _migrate(url: str, schema: str) -> int:
    pool = postgres.open_pool(url, schema, max_size=2)
    try:
        return postgres.migrate(pool, "state", "state_service.store", "migrations/postgres")
    finally:
        pool.close()


def test_replicas_starting_together_apply_each_migration_once(
    postgres_url: str, schemas: list[str]
) -> None:
    applied: list[int] = []
    threads = [
        threading.Thread(target=lambda: applied.append(_migrate(postgres_url, schemas[0])))
        for _ in range(4)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    with psycopg.connect(postgres_url) as conn:
        rows = conn.execute(
            f'SELECT version FROM "{schemas[0]}".schema_migrations '
            "WHERE component = 'state' ORDER BY version".encode()
        ).fetchall()
    # Every replica started (none lost a race on the schema or a migration) and reports the
    # same version; each migration is recorded once.
    versions = sorted(
        int(entry.name[:4])
        for entry in resources.files("state_service.store")
        .joinpath("migrations/postgres")
        .iterdir()
        if entry.name.endswith(".sql")
    )
    assert [r[0] for r in rows] == versions
    assert applied == [versions[-1]] * 4


def test_a_migration_in_one_schema_does_not_wait_for_another(
    postgres_url: str, schemas: list[str]
) -> None:
    busy, other = schemas
    with psycopg.connect(postgres_url, options=f"-c search_path={busy}") as held:
        held.execute(f'CREATE SCHEMA IF NOT EXISTS "{busy}"'.encode())
        held.execute(postgres.MIGRATION_LOCK, ("state",))
        start = time.monotonic()
        assert _migrate(postgres_url, other) > 0
        assert time.monotonic() - start < 10
        held.rollback()
