"""Wires the state service together and serves it."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys

from pydantic import Field

from cairn.v1 import state_pb2, state_pb2_grpc
from cairn_server import log
from cairn_server.auth import Authenticator
from cairn_server.keys_sqlite import SqliteKeyStore
from cairn_server.rpc import RpcGuard
from cairn_server.runner import Runner
from cairn_server.server import Hooks, StartupError, check_security, run_server
from cairn_server.settings import SERVER_ENV, ServerSettings, add_server_flags, settings_from
from state_service.context import ContextSettings
from state_service.core import Deps
from state_service.events import EventHub
from state_service.memfs.repo import MemoryRepos
from state_service.memfs.snapshots import MemorySnapshots
from state_service.servicer import StateServicer
from state_service.store.sqlite import SqliteStateStore
from state_service.tokens import make_counter

DEFAULT_PORT = 50051
SERVICE_NAME = state_pb2.DESCRIPTOR.services_by_name["StateService"].full_name


class StateSettings(ServerSettings):
    """Settings of the state service."""

    compaction_threshold: float = Field(default=0.9, gt=0, le=1)
    tokenizer: str = "estimate"


STATE_ENV = {
    **SERVER_ENV,
    "port": "CAIRN_STATE_PORT",
    "compaction_threshold": "CAIRN_COMPACTION_THRESHOLD",
    "tokenizer": "CAIRN_TOKENIZER",
}


def add_flags(parser: argparse.ArgumentParser) -> None:
    """The state service's flags."""
    add_server_flags(parser, DEFAULT_PORT)
    parser.add_argument(
        "--compaction-threshold", type=float, help="share of the window that needs compaction"
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
    store = SqliteStateStore(data_dir, hub.publish)
    keys = None if settings.insecure_local else SqliteKeyStore(data_dir)
    runner = Runner(inline_reads=True, batch=store.batch)
    try:
        counter = make_counter(settings.tokenizer)
    except ValueError as error:
        raise StartupError(str(error)) from None
    deps = Deps(
        store=store,
        counter=counter,
        memfs=MemorySnapshots(MemoryRepos(data_dir / "memfs")),
    )
    servicer = StateServicer(
        deps,
        RpcGuard(Authenticator(keys, insecure_local=settings.insecure_local)),
        runner,
        hub,
        ContextSettings(compaction_threshold=settings.compaction_threshold),
    )

    def register(server: object) -> list[str]:
        state_pb2_grpc.add_StateServiceServicer_to_server(servicer, server)  # type: ignore[arg-type]
        return [SERVICE_NAME]

    async def on_start() -> None:
        hub.bind(asyncio.get_running_loop())

    def close() -> None:
        runner.close()
        store.close()
        if keys is not None:
            keys.close()

    await run_server(settings, "state", Hooks(register, on_start, [close]))


def main(argv: list[str] | None = None) -> None:
    """`python -m state_service`: the same as `cairn state serve`."""
    parser = argparse.ArgumentParser(prog="python -m state_service", description=__doc__)
    add_flags(parser)
    settings = settings_from_args(parser.parse_args(argv))
    log.configure(settings.log_level)
    logging.getLogger("cairn.state").debug("settings", extra={"settings": settings.model_dump()})
    try:
        asyncio.run(serve(settings))
    except StartupError as error:
        print(f"state service: {error}", file=sys.stderr)
        sys.exit(2)
