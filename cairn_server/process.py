"""Service subprocesses: start one on a port, wait until healthy, stop or kill it.

Used by `cairn up`, the integration tests and the benchmarks.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc


def free_port() -> int:
    """A port nobody listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class ServerProcess:
    """A running server subprocess."""

    module: str
    data_dir: Path
    port: int
    args: list[str]
    env: dict[str, str]
    proc: subprocess.Popen[bytes] | None = None
    log_path: Path = field(default_factory=lambda: Path("/dev/null"))

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 30.0) -> ServerProcess:
        """Starts the process and waits until its health check says SERVING."""
        self.log_path = self.data_dir / f"{self.module}-{self.port}.log"
        log = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                self.module,
                "--port",
                str(self.port),
                "--data-dir",
                str(self.data_dir),
                # Many servers share one machine in tests: metrics only when asked for.
                *([] if "--metrics-port" in self.args else ["--metrics-port", "0"]),
                *self.args,
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, **self.env},
        )
        deadline = time.monotonic() + timeout
        with grpc.insecure_channel(self.address) as channel:
            stub: Any = health_pb2_grpc.HealthStub(channel)  # its type stubs lack Check
            while True:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"{self.module} exited early:\n{self.log()}")
                try:
                    reply = stub.Check(health_pb2.HealthCheckRequest(), timeout=1)
                    if reply.status == health_pb2.HealthCheckResponse.SERVING:
                        return self
                except grpc.RpcError:
                    pass
                if time.monotonic() > deadline:
                    self.kill()
                    raise RuntimeError(f"{self.module} did not become healthy:\n{self.log()}")
                time.sleep(0.05)

    def log(self) -> str:
        """What the process printed."""
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self, timeout: float = 30.0) -> int:
        """SIGTERM, then wait; returns the exit code."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout)

    def kill(self) -> None:
        """SIGKILL: no shutdown code runs."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def restart(self) -> ServerProcess:
        """Stops and starts again on the same port and data directory."""
        self.stop()
        return self.start()
