"""Wires the recall service together and serves it."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from collections import Counter
from collections.abc import Callable, Sequence

import psycopg
from psycopg_pool import PoolTimeout
from pydantic import Field

from cairn.v1 import recall_pb2, recall_pb2_grpc
from cairn_server import log
from cairn_server.auth import Authenticator, KeyStore
from cairn_server.keys_postgres import PostgresKeyStore
from cairn_server.keys_sqlite import SqliteKeyStore
from cairn_server.metrics import Metrics
from cairn_server.rpc import RpcGuard
from cairn_server.runner import Runner
from cairn_server.server import Hooks, StartupError, check_security, run_server
from cairn_server.settings import SERVER_ENV, ServerSettings, add_server_flags, settings_from
from recall_service.core import Deps
from recall_service.models import Record
from recall_service.servicer import RecallServicer
from recall_service.signing import load_or_create
from recall_service.store.base import LogStore
from recall_service.store.postgres import PostgresRecallStore
from recall_service.store.sqlite import SqliteLogStore
from recall_service.validation import DEFAULT_MAX_CONTENT_BYTES

DEFAULT_PORT = 50052
SERVICE_NAME = recall_pb2.DESCRIPTOR.services_by_name["RecallService"].full_name


class RecallSettings(ServerSettings):
    """Settings of the recall service."""

    max_content_bytes: int = Field(default=DEFAULT_MAX_CONTENT_BYTES, ge=1)
    database_url: str = ""
    database_schema: str = "public"


RECALL_ENV = {
    **SERVER_ENV,
    "port": "CAIRN_RECALL_PORT",
    "metrics_port": "CAIRN_RECALL_METRICS_PORT",
    "max_content_bytes": "CAIRN_RECALL_MAX_CONTENT_BYTES",
    "database_url": "CAIRN_DATABASE_URL",
    "database_schema": "CAIRN_DATABASE_SCHEMA",
}


def add_flags(parser: argparse.ArgumentParser) -> None:
    """The recall service's flags."""
    add_server_flags(parser, DEFAULT_PORT)
    parser.add_argument(
        "--max-content-bytes",
        type=int,
        help=f"largest record content in UTF-8 bytes (default {DEFAULT_MAX_CONTENT_BYTES})",
    )
    parser.add_argument(
        "--database-url",
        help="PostgreSQL URL for a fleet (env CAIRN_DATABASE_URL); default: SQLite in the data dir",
    )
    parser.add_argument("--database-schema", help="PostgreSQL schema (default public)")


def settings_from_args(args: argparse.Namespace) -> RecallSettings:
    """Settings from flags and the environment."""
    return settings_from(RecallSettings, args, RECALL_ENV, DEFAULT_PORT)


def count_appends(metrics: Metrics) -> Callable[[Sequence[Record]], None]:
    """Counts durable records by kind (the store calls this after each commit)."""

    def count(records: Sequence[Record]) -> None:
        for kind, n in Counter(r.kind.name.lower() for r in records).items():
            metrics.log_appends.labels(kind).inc(n)

    return count


async def serve(settings: RecallSettings) -> None:
    """Runs the recall service until SIGTERM."""
    check_security(settings, "recall")
    data_dir = settings.resolved_data_dir()
    data_dir.mkdir(parents=True, exist_ok=True)
    metrics = Metrics("recall")
    store: LogStore
    keys: KeyStore | None
    if settings.database_url:
        try:
            pg = PostgresRecallStore(
                settings.database_url, settings.database_schema, on_append=count_appends(metrics)
            )
            keys = (
                None
                if settings.insecure_local
                else PostgresKeyStore(settings.database_url, settings.database_schema)
            )
        except (ValueError, psycopg.Error, PoolTimeout) as error:
            raise StartupError(f"cannot open the PostgreSQL log store: {error}") from None
        store = pg
        # Appends to different streams run in parallel; the database serializes each
        # stream's appends and aborts a unit of work on a conflict, which runs again.
        runner = Runner(inline_reads=False, write_threads=8, retry_on=pg.retryable)
    else:
        sqlite_store = SqliteLogStore(data_dir, on_append=count_appends(metrics))
        store = sqlite_store
        keys = None if settings.insecure_local else SqliteKeyStore(data_dir)
        # Group commit: concurrent writes share one transaction and one fsync, each in its
        # own savepoint, and are answered after the commit that makes them durable.
        runner = Runner(inline_reads=True, batch=sqlite_store.group)
    # The signing key is a file in the data directory on either store: replicas of a fleet
    # mount the same key (docs/recall-service.md).
    deps = Deps(
        store=store, signer=load_or_create(data_dir), max_content_bytes=settings.max_content_bytes
    )
    servicer = RecallServicer(
        deps, RpcGuard(Authenticator(keys, insecure_local=settings.insecure_local), metrics), runner
    )

    def register(server: object) -> list[str]:
        recall_pb2_grpc.add_RecallServiceServicer_to_server(servicer, server)  # type: ignore[arg-type]
        return [SERVICE_NAME]

    def close() -> None:
        runner.close()
        store.close()
        if keys is not None:
            keys.close()

    await run_server(settings, "recall", Hooks(register, None, [close]), metrics)


def main(argv: list[str] | None = None) -> None:
    """`python -m recall_service`: the same as `cairn recall serve`."""
    parser = argparse.ArgumentParser(prog="python -m recall_service", description=__doc__)
    add_flags(parser)
    settings = settings_from_args(parser.parse_args(argv))
    log.configure(settings.log_level)
    logging.getLogger("cairn.recall").debug("settings", extra={"settings": settings.model_dump()})
    try:
        asyncio.run(serve(settings))
    except StartupError as error:
        print(f"recall service: {error}", file=sys.stderr)
        sys.exit(2)
