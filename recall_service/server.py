"""Wires the recall service together and serves it."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys

from pydantic import Field

from cairn.v1 import recall_pb2, recall_pb2_grpc
from cairn_server import log
from cairn_server.auth import Authenticator
from cairn_server.keys_sqlite import SqliteKeyStore
from cairn_server.rpc import RpcGuard
from cairn_server.runner import Runner
from cairn_server.server import Hooks, StartupError, check_security, run_server
from cairn_server.settings import SERVER_ENV, ServerSettings, add_server_flags, settings_from
from recall_service.core import Deps
from recall_service.servicer import RecallServicer
from recall_service.signing import load_or_create
from recall_service.store.sqlite import SqliteLogStore
from recall_service.validation import DEFAULT_MAX_CONTENT_BYTES

DEFAULT_PORT = 50052
SERVICE_NAME = recall_pb2.DESCRIPTOR.services_by_name["RecallService"].full_name


class RecallSettings(ServerSettings):
    """Settings of the recall service."""

    max_content_bytes: int = Field(default=DEFAULT_MAX_CONTENT_BYTES, ge=1)


RECALL_ENV = {
    **SERVER_ENV,
    "port": "CAIRN_RECALL_PORT",
    "max_content_bytes": "CAIRN_RECALL_MAX_CONTENT_BYTES",
}


def add_flags(parser: argparse.ArgumentParser) -> None:
    """The recall service's flags."""
    add_server_flags(parser, DEFAULT_PORT)
    parser.add_argument(
        "--max-content-bytes",
        type=int,
        help=f"largest record content in UTF-8 bytes (default {DEFAULT_MAX_CONTENT_BYTES})",
    )


def settings_from_args(args: argparse.Namespace) -> RecallSettings:
    """Settings from flags and the environment."""
    return settings_from(RecallSettings, args, RECALL_ENV, DEFAULT_PORT)


async def serve(settings: RecallSettings) -> None:
    """Runs the recall service until SIGTERM."""
    check_security(settings, "recall")
    data_dir = settings.resolved_data_dir()
    data_dir.mkdir(parents=True, exist_ok=True)
    store = SqliteLogStore(data_dir)
    keys = None if settings.insecure_local else SqliteKeyStore(data_dir)
    # Group commit: concurrent writes share one transaction and one fsync, each in its own
    # savepoint, and are answered after the commit that makes them durable.
    runner = Runner(inline_reads=True, batch=store.group)
    deps = Deps(
        store=store, signer=load_or_create(data_dir), max_content_bytes=settings.max_content_bytes
    )
    servicer = RecallServicer(
        deps, RpcGuard(Authenticator(keys, insecure_local=settings.insecure_local)), runner
    )

    def register(server: object) -> list[str]:
        recall_pb2_grpc.add_RecallServiceServicer_to_server(servicer, server)  # type: ignore[arg-type]
        return [SERVICE_NAME]

    def close() -> None:
        runner.close()
        store.close()
        if keys is not None:
            keys.close()

    await run_server(settings, "recall", Hooks(register, None, [close]))


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
