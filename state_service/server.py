"""Wires the state service together and serves it."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
from pathlib import Path

from pydantic import Field

from cairn.v1 import state_pb2, state_pb2_grpc
from cairn_server import event_loop, log
from cairn_server.auth import LOCAL_PRINCIPAL, Authenticator, KeyStore
from cairn_server.keys_postgres import PostgresKeyStore
from cairn_server.keys_sqlite import SqliteKeyStore
from cairn_server.metrics import Metrics
from cairn_server.rpc import RpcGuard
from cairn_server.runner import Runner
from cairn_server.server import Hooks, StartupError, check_security, run_server
from cairn_server.settings import SERVER_ENV, ServerSettings, add_server_flags, settings_from
from state_service.context import ContextSettings
from state_service.core import Deps
from state_service.events import EventHub
from state_service.memfs.repo import MemoryRepos
from state_service.memfs.snapshots import MemorySnapshots
from state_service.recall_link import Forwarder, RecallCredentials, RecallLink
from state_service.servicer import StateServicer
from state_service.store.base import StateStore
from state_service.store.postgres import PostgresStateStore
from state_service.store.sqlite import SqliteStateStore
from state_service.tokens import make_counter

DEFAULT_PORT = 50051
SERVICE_NAME = state_pb2.DESCRIPTOR.services_by_name["StateService"].full_name


class StateSettings(ServerSettings):
    """Settings of the state service."""

    compaction_threshold: float = Field(default=0.9, gt=0, le=1)
    tokenizer: str = "estimate"
    database_url: str = ""
    database_schema: str = "public"
    memfs_sync: bool = True
    recall_addr: str = ""
    recall_keys: str = ""
    recall_tls_ca: Path | None = None


STATE_ENV = {
    **SERVER_ENV,
    "port": "CAIRN_STATE_PORT",
    "metrics_port": "CAIRN_STATE_METRICS_PORT",
    "compaction_threshold": "CAIRN_COMPACTION_THRESHOLD",
    "tokenizer": "CAIRN_TOKENIZER",
    "database_url": "CAIRN_DATABASE_URL",
    "database_schema": "CAIRN_DATABASE_SCHEMA",
    "memfs_sync": "CAIRN_MEMFS_SYNC",
    "recall_addr": "CAIRN_RECALL_ADDR",
    "recall_keys": "CAIRN_RECALL_KEYS",
    "recall_tls_ca": "CAIRN_RECALL_TLS_CA",
}


def add_flags(parser: argparse.ArgumentParser) -> None:
    """The state service's flags."""
    add_server_flags(parser, DEFAULT_PORT)
    parser.add_argument(
        "--compaction-threshold", type=float, help="share of the window that needs compaction"
    )
    parser.add_argument(
        "--database-url",
        help="PostgreSQL URL for a fleet (env CAIRN_DATABASE_URL); default: SQLite in the data dir",
    )
    parser.add_argument("--database-schema", help="PostgreSQL schema (default public)")
    parser.add_argument(
        "--no-memfs-sync",
        dest="memfs_sync",
        action="store_false",
        default=None,
        help="skip flushing MemFS objects to disk before a revision moves (env CAIRN_MEMFS_SYNC)",
    )
    parser.add_argument(
        "--recall-addr",
        help="recall service address: forward messages there and answer recall tools "
        "(env CAIRN_RECALL_ADDR)",
    )
    parser.add_argument(
        "--recall-keys",
        help="JSON object tenant -> recall service key, or a file holding one "
        "(env CAIRN_RECALL_KEYS); tenants without a key are not forwarded",
    )
    parser.add_argument(
        "--recall-tls-ca", help="PEM roots to reach the recall service over TLS (default plaintext)"
    )
    parser.add_argument(
        "--tokenizer",
        help="token counter: 'estimate' (default), 'bpe-openai:<encoding>', "
        "'tiktoken:<encoding>' or 'hf:<tokenizer.json>' (env CAIRN_TOKENIZER)",
    )


def settings_from_args(args: argparse.Namespace) -> StateSettings:
    """Settings from flags and the environment."""
    return settings_from(StateSettings, args, STATE_ENV, DEFAULT_PORT)


async def serve(settings: StateSettings) -> None:
    """Runs the state service until SIGTERM."""
    check_security(settings, "state")
    data_dir = settings.resolved_data_dir()
    data_dir.mkdir(parents=True, exist_ok=True)
    hub = EventHub()
    store: StateStore
    keys: KeyStore | None
    if settings.database_url:
        pg = PostgresStateStore(settings.database_url, schema=settings.database_schema)
        store = pg
        keys = (
            None
            if settings.insecure_local
            else PostgresKeyStore(settings.database_url, settings.database_schema)
        )
        runner = Runner(inline_reads=False, write_threads=8, retry_on=pg.retryable)
    else:
        sqlite_store = SqliteStateStore(data_dir)
        store = sqlite_store
        keys = None if settings.insecure_local else SqliteKeyStore(data_dir)
        runner = Runner(inline_reads=True, batch=sqlite_store.batch)
    try:
        counter = make_counter(settings.tokenizer)
    except ValueError as error:
        raise StartupError(str(error)) from None
    metrics = Metrics("state")
    deps = Deps(
        store=store,
        counter=counter,
        metrics=metrics,
        memfs=MemorySnapshots(MemoryRepos(data_dir / "memfs", sync=settings.memfs_sync)),
    )
    link = recall_link(settings)
    forwarder = None
    if link is not None:
        deps.forwards = link.credentials.serves
        forwarder = Forwarder(deps, runner, link)
    servicer = StateServicer(
        deps,
        RpcGuard(Authenticator(keys, insecure_local=settings.insecure_local), metrics),
        runner,
        hub,
        ContextSettings(compaction_threshold=settings.compaction_threshold),
        link,
        forwarder,
    )
    tasks: list[asyncio.Task[None]] = []

    def register(server: object) -> list[str]:
        state_pb2_grpc.add_StateServiceServicer_to_server(servicer, server)  # type: ignore[arg-type]
        return [SERVICE_NAME]

    async def on_start() -> None:
        hub.bind(asyncio.get_running_loop())
        store.set_publisher(hub.publish)
        if forwarder is not None:
            tasks.append(asyncio.create_task(forwarder.run()))

    async def stop_forwarding() -> None:
        if forwarder is not None:
            forwarder.stop()
            await asyncio.gather(*tasks, return_exceptions=True)
        if link is not None:
            await link.close()

    def close() -> None:
        runner.close()
        store.close()
        if keys is not None:
            keys.close()

    await run_server(
        settings, "state", Hooks(register, on_start, [stop_forwarding, close]), metrics
    )


def recall_link(settings: StateSettings) -> RecallLink | None:
    """The link to the recall service, when one is configured."""
    if not settings.recall_addr:
        return None
    raw = settings.recall_keys.strip()
    if raw and not raw.startswith("{"):
        try:
            raw = Path(raw).expanduser().read_text()
        except OSError as error:
            raise StartupError(f"cannot read --recall-keys {raw}: {error.strerror}") from None
    try:
        keys = json.loads(raw) if raw else {}
    except json.JSONDecodeError as error:
        raise StartupError(f"--recall-keys is not a JSON object: {error.msg}") from None
    if not isinstance(keys, dict) or not all(isinstance(v, str) for v in keys.values()):
        raise StartupError("--recall-keys must map tenants to API keys")
    # Without keys, a recall service run with --insecure-local serves the local tenant.
    open_tenant = LOCAL_PRINCIPAL.tenant if not keys and settings.insecure_local else ""
    roots = settings.recall_tls_ca.read_bytes() if settings.recall_tls_ca else None
    return RecallLink(
        settings.recall_addr,
        RecallCredentials(keys, open_tenant),
        tls_roots=roots,
        plaintext=roots is None,
    )


def main(argv: list[str] | None = None) -> None:
    """`python -m state_service`: the same as `cairn state serve`."""
    parser = argparse.ArgumentParser(prog="python -m state_service", description=__doc__)
    add_flags(parser)
    settings = settings_from_args(parser.parse_args(argv))
    log.configure(settings.log_level, settings.access_log)
    logging.getLogger("cairn.state").debug("settings", extra={"settings": settings.model_dump()})
    try:
        event_loop.run(serve(settings), settings.event_loop)
    except StartupError as error:
        print(f"state service: {error}", file=sys.stderr)
        sys.exit(2)
