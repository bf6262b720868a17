"""The `cairn` command: run the services, manage keys, and drive agents from a shell."""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from cairn_server.auth import Role, create_key, revoke_key
from cairn_server.errors import CairnError
from cairn_server.keys_postgres import PostgresKeyStore
from cairn_server.keys_sqlite import SqliteKeyStore
from cairn_server.server import StartupError
from cairn_server.settings import DEFAULT_DATA_DIR

ADMIN_KEY_FILE = "admin.key"


def _data_dir(args: argparse.Namespace) -> Path:
    raw = getattr(args, "data_dir", None) or os.environ.get("CAIRN_DATA_DIR") or DEFAULT_DATA_DIR
    return Path(raw).expanduser()


def _print(args: argparse.Namespace, human: str, data: dict[str, Any]) -> None:
    if getattr(args, "json", False):
        print(json.dumps(data, sort_keys=True))
    else:
        print(human)


# --- servers -------------------------------------------------------------------------------


def cmd_state_serve(args: argparse.Namespace) -> int:
    """Runs the state service in this process."""
    from cairn_server import event_loop, log
    from state_service.server import serve, settings_from_args

    settings = settings_from_args(args)
    log.configure(settings.log_level, settings.access_log)
    event_loop.run(serve(settings), settings.event_loop)
    return 0


def cmd_recall_serve(args: argparse.Namespace) -> int:
    """Runs the recall service in this process."""
    from cairn_server import event_loop, log
    from recall_service.server import serve, settings_from_args

    settings = settings_from_args(args)
    log.configure(settings.log_level, settings.access_log)
    event_loop.run(serve(settings), settings.event_loop)
    return 0


def ensure_admin_key(data_dir: Path) -> str | None:
    """On a data directory without keys, creates an admin key for tenant 'default' and
    saves it (mode 0600) to `admin.key`, so the CLI on this machine can use it."""
    store = SqliteKeyStore(data_dir)
    try:
        if store.list_keys(None):
            return None
        key, _ = create_key(store, "default", Role.ADMIN, "admin")
    finally:
        store.close()
    path = data_dir / ADMIN_KEY_FILE
    path.touch(mode=0o600)
    path.write_text(key + "\n")
    return key


RECALL_KEYS_FILE = "recall-keys.json"


def ensure_recall_keys(data_dir: Path) -> Path:
    """A service key for tenant 'default' with which the state service forwards messages to
    the recall service, in `recall-keys.json` (mode 0600); created once."""
    path = data_dir / RECALL_KEYS_FILE
    if path.exists():
        return path
    store = SqliteKeyStore(data_dir)
    try:
        key, _ = create_key(store, "default", Role.SERVICE, "state-service")
    finally:
        store.close()
    path.touch(mode=0o600)
    path.write_text(json.dumps({"default": key}) + "\n")
    return path


def cmd_up(args: argparse.Namespace) -> int:
    """Starts every service on loopback as child processes, stops them together."""
    data_dir = _data_dir(args)
    data_dir.mkdir(parents=True, exist_ok=True)
    if not args.insecure_local:
        key = ensure_admin_key(data_dir)
        if key is not None:
            print(
                f"Created an admin API key for tenant 'default' (saved to "
                f"{data_dir / ADMIN_KEY_FILE}):\n  {key}\nThe CLI on this machine reads it "
                "from there; other clients send it as 'authorization: Bearer <key>'.",
                flush=True,
            )
    common = ["--data-dir", str(data_dir), "--host", args.host]
    if args.insecure_local:
        common.append("--insecure-local")
    link = ["--recall-addr", f"{args.host}:{args.recall_port}"]
    if not args.insecure_local:
        link += ["--recall-keys", str(ensure_recall_keys(data_dir))]
    services = [
        (
            "state",
            [
                sys.executable,
                "-m",
                "state_service",
                *common,
                "--port",
                str(args.state_port),
                *link,
            ],
        ),
        (
            "recall",
            [sys.executable, "-m", "recall_service", *common, "--port", str(args.recall_port)],
        ),
    ]
    children = [subprocess.Popen(cmd) for _, cmd in services]
    names = ", ".join(
        f"{name} on {args.host}:{cmd[cmd.index('--port') + 1]}" for name, cmd in services
    )
    print(f"Cairn is starting: {names}; data in {data_dir}. Ctrl-C stops it.", flush=True)

    def stop(signum: int, _frame: object) -> None:
        for child in children:
            if child.poll() is None:
                child.send_signal(signal.SIGTERM)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    code = 0
    while any(child.poll() is None for child in children):
        for child in children:
            if child.poll() is not None and child.returncode != 0:
                code = child.returncode
                stop(signal.SIGTERM, None)
        time.sleep(0.2)
    return code


# --- keys ----------------------------------------------------------------------------------


def _key_store(args: argparse.Namespace) -> SqliteKeyStore | PostgresKeyStore:
    """The fleet's PostgreSQL when --database-url is given, else the data directory's file."""
    if getattr(args, "database_url", ""):
        return PostgresKeyStore(args.database_url, args.database_schema)
    return SqliteKeyStore(_data_dir(args))


def cmd_keys_create(args: argparse.Namespace) -> int:
    """Creates an API key and prints it once."""
    store = _key_store(args)
    try:
        key, record = create_key(store, args.tenant, args.role, args.subject)
    finally:
        store.close()
    _print(
        args,
        f"{key}\n(key id {record.key_id}, tenant {record.tenant}, role {record.role.value}, "
        f"subject {record.subject}; shown once, store it now)",
        {
            "key": key,
            "key_id": record.key_id,
            "tenant": record.tenant,
            "role": record.role.value,
            "subject": record.subject,
        },
    )
    return 0


def cmd_keys_list(args: argparse.Namespace) -> int:
    """Lists keys (never the keys themselves)."""
    store = _key_store(args)
    try:
        records = store.list_keys(args.tenant)
    finally:
        store.close()
    rows = [
        {
            "key_id": r.key_id,
            "tenant": r.tenant,
            "role": r.role.value,
            "subject": r.subject,
            "created_at": r.created_at,
            "revoked": r.revoked_at is not None,
        }
        for r in records
    ]
    human = "\n".join(
        f"{r['key_id']}  {r['tenant']:<16} {r['role']:<8} {r['subject']}"
        + ("  (revoked)" if r["revoked"] else "")
        for r in rows
    )
    _print(args, human or "no keys", {"keys": rows})
    return 0


def cmd_keys_revoke(args: argparse.Namespace) -> int:
    """Revokes a key by id."""
    store = _key_store(args)
    try:
        revoke_key(store, args.key_id)
    finally:
        store.close()
    _print(args, f"revoked {args.key_id}", {"revoked": args.key_id})
    return 0


# --- parser --------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    """The whole command tree."""
    from cairn_server import cli_agents, cli_demo, cli_streams
    from recall_service.server import add_flags as add_recall_flags
    from state_service.server import add_flags as add_state_flags

    parser = argparse.ArgumentParser(prog="cairn", description="Cairn: memory for LLM agents.")
    sub = parser.add_subparsers(dest="command", required=True)

    up = sub.add_parser("up", help="start every service on loopback with embedded storage")
    up.add_argument("--data-dir", help="data directory (env CAIRN_DATA_DIR; default ~/.cairn)")
    up.add_argument("--host", default="127.0.0.1")
    up.add_argument("--state-port", type=int, default=50051)
    up.add_argument("--recall-port", type=int, default=50052)
    up.add_argument("--insecure-local", action="store_true", help="serve without API keys")
    up.set_defaults(func=cmd_up)

    state = sub.add_parser("state", help="the state service")
    state_sub = state.add_subparsers(dest="state_command", required=True)
    state_serve = state_sub.add_parser("serve", help="run the state service")
    add_state_flags(state_serve)
    state_serve.set_defaults(func=cmd_state_serve)

    recall = sub.add_parser("recall", help="the recall service")
    recall_sub = recall.add_subparsers(dest="recall_command", required=True)
    recall_serve = recall_sub.add_parser("serve", help="run the recall service")
    add_recall_flags(recall_serve)
    recall_serve.set_defaults(func=cmd_recall_serve)
    from recall_service import reindex_command

    reindex_command.add_command(recall_sub)

    keys = sub.add_parser("keys", help="API keys")
    keys_sub = keys.add_subparsers(dest="keys_command", required=True)
    create = keys_sub.add_parser("create", help="create a key and print it once")
    create.add_argument("--tenant", required=True)
    create.add_argument("--role", required=True, choices=[r.value for r in Role])
    create.add_argument("--subject", help="who the key speaks for (an agent id for role agent)")
    listing = keys_sub.add_parser("list", help="list keys")
    listing.add_argument("--tenant")
    revoke = keys_sub.add_parser("revoke", help="revoke a key")
    revoke.add_argument("key_id")
    for command, func in (
        (create, cmd_keys_create),
        (listing, cmd_keys_list),
        (revoke, cmd_keys_revoke),
    ):
        command.add_argument("--data-dir", help="data directory holding keys.sqlite3")
        command.add_argument(
            "--database-url",
            default=os.environ.get("CAIRN_DATABASE_URL", ""),
            help="the fleet's PostgreSQL instead of keys.sqlite3 (env CAIRN_DATABASE_URL)",
        )
        command.add_argument(
            "--database-schema", default=os.environ.get("CAIRN_DATABASE_SCHEMA", "public")
        )
        command.add_argument("--json", action="store_true", help="machine-readable output")
        command.set_defaults(func=func)

    cli_agents.add_commands(sub)
    cli_streams.add_commands(sub)
    cli_demo.add_commands(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of the `cairn` console script."""
    args = build_parser().parse_args(argv)
    func: Callable[[argparse.Namespace], int] = args.func
    try:
        code = func(args)
    except (CairnError, StartupError) as error:
        print(f"cairn: {getattr(error, 'message', error)}", file=sys.stderr)
        code = 2
    except KeyboardInterrupt:
        code = 130
    sys.exit(code)
