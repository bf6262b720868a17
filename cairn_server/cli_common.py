"""What the `cairn` client commands share: connecting, printing, and one-line errors."""

from __future__ import annotations

import argparse
import dataclasses
import enum
import json
import os
import sys
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import cairn
from cairn_server.settings import DEFAULT_DATA_DIR

Handler = Callable[[argparse.Namespace, cairn.Client], int]


def api_key(args: argparse.Namespace) -> str | None:
    """The key from --api-key, CAIRN_API_KEY, or the data directory's admin.key."""
    if getattr(args, "api_key", None):
        return str(args.api_key)
    if os.environ.get("CAIRN_API_KEY"):
        return os.environ["CAIRN_API_KEY"]
    data_dir = Path(args.data_dir or os.environ.get("CAIRN_DATA_DIR") or DEFAULT_DATA_DIR)
    path = data_dir.expanduser() / "admin.key"
    return path.read_text().strip() if path.exists() else None


def plain(value: Any) -> Any:
    """A value as JSON can hold it: dataclasses as objects, bytes as hex, times in ISO 8601."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    return value


def emit(args: argparse.Namespace, human: str, data: Any) -> None:
    """Prints `human`, or `data` as one JSON object with --json."""
    if getattr(args, "json", False):
        print(json.dumps(plain(data), sort_keys=True))
    else:
        print(human)


def fail(message: str, code: int = 2) -> int:
    """One line on stderr a person can act on; returns the exit code."""
    print(f"cairn: {message}", file=sys.stderr)
    return code


def add_connection_flags(parser: argparse.ArgumentParser, handler: Handler) -> None:
    """Where the services are and how to reach them; runs `handler` with a client."""
    parser.add_argument(
        "--state-addr",
        default=os.environ.get("CAIRN_STATE_ADDR", "127.0.0.1:50051"),
        help="state service (env CAIRN_STATE_ADDR)",
    )
    parser.add_argument(
        "--recall-addr",
        default=os.environ.get("CAIRN_RECALL_ADDR", "127.0.0.1:50052"),
        help="recall service (env CAIRN_RECALL_ADDR)",
    )
    parser.add_argument("--api-key", help="API key (env CAIRN_API_KEY; default: admin.key)")
    parser.add_argument("--data-dir", help="where admin.key is (default ~/.cairn)")
    parser.add_argument("--tls-ca", help="PEM roots to verify the servers' certificates")
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds per call")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.set_defaults(func=_connected(handler))


def _connected(handler: Handler) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        tls = cairn.TLS(root_certificates=Path(args.tls_ca).read_bytes()) if args.tls_ca else None
        try:
            client = cairn.Client(
                args.state_addr,
                args.recall_addr,
                api_key=api_key(args),
                tls=tls,
                timeout=args.timeout,
            )
        except (ValueError, OSError) as error:
            return fail(str(error))
        with client:
            try:
                return handler(args, client)
            except cairn.Unavailable:
                return fail(
                    f"cannot reach Cairn at {args.state_addr} / {args.recall_addr}; is `cairn up` "
                    "running?",
                    1,
                )
            except cairn.CairnError as error:
                return fail(f"{error.code.name}: {error.details}", 1)
            except OSError as error:
                return fail(f"{error.strerror or error}: {getattr(error, 'filename', '')}", 1)

    return run
