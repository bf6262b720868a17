"""Server settings from flags and `CAIRN_*` environment variables (flags win)."""

from __future__ import annotations

import argparse
import ipaddress
import os
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel, Field

from cairn_server.event_loop import CHOICES as EVENT_LOOPS
from cairn_server.event_loop import EventLoop

DEFAULT_DATA_DIR = Path("~/.cairn")


class ServerSettings(BaseModel):
    """What every Cairn server needs to start."""

    host: str = "127.0.0.1"
    port: int = Field(default=0, ge=0, le=65535)
    data_dir: Path = DEFAULT_DATA_DIR
    insecure_local: bool = False
    max_message_bytes: int = Field(default=4 * 1024 * 1024, ge=1024)
    grace_seconds: float = Field(default=10.0, ge=0)
    log_level: str = "info"
    access_log: bool = False
    tls_cert: Path | None = None
    tls_key: Path | None = None
    metrics_port: int = Field(default=0, ge=0, le=65535)
    metrics_host: str = ""
    otlp_endpoint: str = ""
    event_loop: EventLoop = "uvloop"

    def resolved_data_dir(self) -> Path:
        """The data directory, with `~` expanded."""
        return self.data_dir.expanduser()


def is_loopback(host: str) -> bool:
    """True for hosts that only this machine can reach."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def env_bool(value: str) -> bool:
    """Parses 1/true/yes/on (any case) as True."""
    return value.strip().lower() in {"1", "true", "yes", "on"}


def add_server_flags(parser: argparse.ArgumentParser, default_port: int) -> None:
    """Adds the flags every server shares."""
    parser.add_argument("--host", help="address to bind (env CAIRN_HOST; default 127.0.0.1)")
    parser.add_argument(
        "--port", type=int, help=f"port to bind, 0 for any free one (default {default_port})"
    )
    parser.add_argument("--data-dir", help="data directory (env CAIRN_DATA_DIR; default ~/.cairn)")
    parser.add_argument(
        "--insecure-local",
        action="store_true",
        default=None,
        help="serve without API keys; only on a loopback address (env CAIRN_INSECURE_LOCAL)",
    )
    parser.add_argument("--max-message-bytes", type=int, help="largest request accepted")
    parser.add_argument("--grace-seconds", type=float, help="how long in-flight calls may finish")
    parser.add_argument("--log-level", help="debug, info, warning or error")
    parser.add_argument(
        "--access-log",
        action="store_true",
        default=None,
        help="log every RPC that succeeded (method, caller, ms) whatever --log-level says "
        "(env CAIRN_ACCESS_LOG)",
    )
    parser.add_argument(
        "--event-loop",
        choices=EVENT_LOOPS,
        help="uvloop (default, when installed) or asyncio's own (env CAIRN_EVENT_LOOP)",
    )
    parser.add_argument("--tls-cert", help="PEM certificate chain; enables TLS with --tls-key")
    parser.add_argument("--tls-key", help="PEM private key")
    parser.add_argument(
        "--metrics-port",
        type=int,
        help=f"Prometheus /metrics port, 0 to turn off (default {default_port - 41000})",
    )
    parser.add_argument("--metrics-host", help="address for /metrics (default: --host)")
    parser.add_argument(
        "--otlp-endpoint",
        help="send OpenTelemetry traces to this OTLP/gRPC endpoint "
        "(env CAIRN_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_ENDPOINT)",
    )


SERVER_ENV = {
    "host": "CAIRN_HOST",
    "data_dir": "CAIRN_DATA_DIR",
    "insecure_local": "CAIRN_INSECURE_LOCAL",
    "max_message_bytes": "CAIRN_MAX_MESSAGE_BYTES",
    "grace_seconds": "CAIRN_GRACE_SECONDS",
    "log_level": "CAIRN_LOG_LEVEL",
    "access_log": "CAIRN_ACCESS_LOG",
    "tls_cert": "CAIRN_TLS_CERT",
    "tls_key": "CAIRN_TLS_KEY",
    "metrics_host": "CAIRN_METRICS_HOST",
    "otlp_endpoint": "CAIRN_OTLP_ENDPOINT",
    "event_loop": "CAIRN_EVENT_LOOP",
}

BOOL_SETTINGS = frozenset({"insecure_local", "access_log"})

S = TypeVar("S", bound=ServerSettings)


def settings_from(
    cls: type[S], args: argparse.Namespace, env_names: dict[str, str], default_port: int
) -> S:
    """Merges defaults, `CAIRN_*` variables and flags, in that order of precedence.

    `env_names` maps each settings field to its environment variable (SERVER_ENV plus the
    service's own, including its port).
    """
    env = os.environ
    # Metrics listen 41000 below the gRPC port: 9051 for the state service, 9052 for recall.
    values: dict[str, object] = {"port": default_port, "metrics_port": default_port - 41000}
    if env.get("OTEL_EXPORTER_OTLP_ENDPOINT"):
        values["otlp_endpoint"] = env["OTEL_EXPORTER_OTLP_ENDPOINT"]
    for name, var in env_names.items():
        if env.get(var, "") != "":
            raw = env[var]
            values[name] = env_bool(raw) if name in BOOL_SETTINGS else raw
    for name in cls.model_fields:
        flag = getattr(args, name, None)
        if flag is not None:
            values[name] = flag
    return cls.model_validate(values)
