"""Fixtures shared by all tests."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

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
