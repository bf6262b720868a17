"""Fixtures shared by all tests."""

from __future__ import annotations

import atexit
import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest

from tests.servers import ServerProcess, free_port


@pytest.fixture
def server_factory(tmp_path: Path) -> Iterator[Callable[..., ServerProcess]]:
    """Starts server processes that are stopped when the test ends."""
    started: list[ServerProcess] = []

    def start(
        module: str = "state_service",
        *args: str,
        data_dir: Path | None = None,
        env: dict[str, str] | None = None,
    ) -> ServerProcess:
        server = ServerProcess(
            module, data_dir or tmp_path / "data", free_port(), list(args), env or {}
        )
        server.data_dir.mkdir(parents=True, exist_ok=True)
        started.append(server.start())
        return server

    yield start
    for server in started:
        server.kill()


POSTGRES_ENV = "CAIRN_TEST_POSTGRES_URL"


def _docker_postgres() -> str | None:
    """A PostgreSQL container from testcontainers, when a Docker engine answers."""
    try:
        from testcontainers.community.postgres import PostgresContainer
        from testcontainers.core.docker_client import DockerClient

        DockerClient()  # raises when no Docker engine answers
    except Exception:
        return None
    container = PostgresContainer("postgres:16-alpine")
    container.start()
    atexit.register(container.stop)
    return str(container.get_connection_url()).replace("+psycopg2", "")


@pytest.fixture(scope="session")
def postgres_url() -> str:
    """PostgreSQL for the suite: $CAIRN_TEST_POSTGRES_URL, else a testcontainers container
    when Docker answers, else the tests that need it are skipped, saying so."""
    url = os.environ.get(POSTGRES_ENV) or _docker_postgres()
    if not url:
        pytest.skip(
            f"PostgreSQL unreachable: set {POSTGRES_ENV} or run a Docker engine "
            "(the PostgreSQL half of the store suite did not run)"
        )
    try:
        with psycopg.connect(url, connect_timeout=5) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as error:
        # A URL that was given but does not answer is a broken setup, not a skip.
        pytest.fail(f"{POSTGRES_ENV}={url} does not answer: {error}")
    return url


@pytest.fixture
def postgres_schema(postgres_url: str) -> Iterator[str]:
    """A fresh schema for one test, dropped afterwards."""
    schema = f"t_{uuid.uuid4().hex[:12]}"
    yield schema
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'.encode())


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def state_backend(request: pytest.FixtureRequest) -> Iterator[list[str]]:
    """Server flags for each store backend: the module's tests run on both."""
    if request.param == "sqlite":
        yield []
        return
    url: str = request.getfixturevalue("postgres_url")
    schema = f"m_{uuid.uuid4().hex[:12]}"
    yield ["--database-url", url, "--database-schema", schema]
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'.encode())


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def recall_backend(request: pytest.FixtureRequest) -> Iterator[list[str]]:
    """Recall server flags for each log store: the module's tests run on both (PostgreSQL in
    a schema of the module's own, dropped afterwards)."""
    if request.param == "sqlite":
        yield []
        return
    url: str = request.getfixturevalue("postgres_url")
    schema = f"r_{uuid.uuid4().hex[:12]}"
    yield ["--database-url", url, "--database-schema", schema]
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'.encode())
