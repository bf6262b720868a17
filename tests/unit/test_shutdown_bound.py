"""A stopping server whose shutdown gets stuck still ends, with an error logged, once the
grace time and the closing allowance have passed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from tests.servers import free_port

SCRIPT = textwrap.dedent(
    """
    import asyncio, sys, time
    from cairn_server import log, server
    from cairn_server.settings import ServerSettings

    log.configure("info")

    server.SHUTDOWN_ALLOWANCE_S = 1.0

    def stuck() -> None:
        time.sleep(60)  # a store that never finishes closing

    settings = ServerSettings(port=int(sys.argv[1]), grace_seconds=0.5, insecure_local=True)
    hooks = server.Hooks(lambda s: [], None, [stuck])
    asyncio.run(server.run_server(settings, "stuck", hooks))
    """
)


def test_a_stuck_shutdown_ends_after_grace_and_allowance(tmp_path: Path) -> None:
    port = free_port()
    log = tmp_path / "out.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-c", SCRIPT, str(port)],
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=Path(__file__).resolve().parents[2],
            env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
        )
        deadline = time.monotonic() + 30
        while b'"msg": "serving"' not in log.read_bytes():  # not the insecure-local warning
            assert proc.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)
        start = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(30)
        finally:
            proc.kill()
        took = time.monotonic() - start
    assert code == 1, log.read_text()
    assert 1.4 < took < 15, took
    assert "shutdown did not finish in time; exiting without it" in log.read_text()
