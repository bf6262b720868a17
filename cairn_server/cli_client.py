"""`cairn agent ...` and `cairn block ...`: the state service from a shell."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
from google.protobuf import field_mask_pb2, json_format
from google.protobuf.message import Message

from cairn.connection import Authenticated
from cairn.v1 import state_pb2, state_pb2_grpc
from cairn_server.settings import DEFAULT_DATA_DIR

Handler = Callable[[argparse.Namespace, Any], int]


def api_key(args: argparse.Namespace) -> str | None:
    """The key from --api-key, CAIRN_API_KEY, or the data directory's admin.key."""
    if args.api_key:
        return str(args.api_key)
    if os.environ.get("CAIRN_API_KEY"):
        return os.environ["CAIRN_API_KEY"]
    data_dir = Path(args.data_dir or os.environ.get("CAIRN_DATA_DIR") or DEFAULT_DATA_DIR)
    path = data_dir.expanduser() / "admin.key"
    return path.read_text().strip() if path.exists() else None


def _show(args: argparse.Namespace, message: Message, human: str) -> None:
    if args.json:
        print(json_format.MessageToJson(message, indent=None, sort_keys=True))
    else:
        print(human)


def _block_line(block: state_pb2.Block) -> str:
    return (
        f"{block.id}  label={block.label}  version={block.version}  "
        f"chars={len(block.value)}/{block.limit}\n{block.value}"
    )


def block_create(args: argparse.Namespace, stub: state_pb2_grpc.StateServiceStub) -> int:
    """cairn block create"""
    response = stub.CreateBlock(
        state_pb2.CreateBlockRequest(
            block=state_pb2.Block(
                label=args.label,
                value=args.value,
                description=args.description or "",
                limit=args.limit or 0,
                read_only=args.read_only,
            )
        )
    )
    if args.quiet:
        print(response.block.id)
    else:
        _show(args, response.block, _block_line(response.block))
    return 0


def block_show(args: argparse.Namespace, stub: state_pb2_grpc.StateServiceStub) -> int:
    """cairn block show"""
    response = stub.GetBlock(state_pb2.GetBlockRequest(block_id=args.block_id))
    _show(args, response.block, _block_line(response.block))
    return 0


def block_set(args: argparse.Namespace, stub: state_pb2_grpc.StateServiceStub) -> int:
    """cairn block set"""
    block = state_pb2.Block(id=args.block_id)
    paths = []
    for name in ("value", "description", "limit", "label"):
        value = getattr(args, name)
        if value is not None:
            setattr(block, name, value)
            paths.append(name)
    if not paths:
        print(
            "cairn: nothing to set; pass --value, --description, --limit or --label",
            file=sys.stderr,
        )
        return 2
    request = state_pb2.UpdateBlockRequest(
        block=block, update_mask=field_mask_pb2.FieldMask(paths=paths)
    )
    if args.expected_version is not None:
        request.expected_version = args.expected_version
    response = stub.UpdateBlock(request)
    human = _block_line(response.block) + (
        f"\nrebuilt prompts of {len(response.rebuilt_agent_ids)} agent(s): "
        + ", ".join(response.rebuilt_agent_ids)
        if response.rebuilt_agent_ids
        else ""
    )
    _show(args, response, human)
    return 0


def agent_create(args: argparse.Namespace, stub: state_pb2_grpc.StateServiceStub) -> int:
    """cairn agent create"""
    blocks = []
    for spec in args.block or []:
        label, sep, value = spec.partition("=")
        if not sep:
            print(f"cairn: --block takes LABEL=VALUE, got {spec!r}", file=sys.stderr)
            return 2
        blocks.append(state_pb2.Block(label=label, value=value))
    modes = {
        "standard": state_pb2.MEMORY_MODE_STANDARD,
        "line_numbered": state_pb2.MEMORY_MODE_LINE_NUMBERED,
    }
    response = stub.CreateAgent(
        state_pb2.CreateAgentRequest(
            name=args.name,
            system=args.system or "",
            model=args.model or "",
            context_window=args.context_window or 0,
            memory_blocks=blocks,
            block_ids=args.block_id or [],
            memory_mode=modes[args.memory_mode],
        )
    )
    agent = response.agent
    if args.quiet:
        print(agent.id)
        return 0
    _show(
        args,
        agent,
        f"{agent.id}  name={agent.name}  blocks=" + ",".join(b.label for b in agent.blocks),
    )
    return 0


def agent_show(args: argparse.Namespace, stub: state_pb2_grpc.StateServiceStub) -> int:
    """cairn agent show"""
    agent = stub.GetAgent(state_pb2.GetAgentRequest(agent_id=args.agent_id)).agent
    lines = [
        f"{agent.id}  name={agent.name}  version={agent.version}  "
        f"memory_revision={agent.memory_revision}",
        *(f"  block {b.label} ({b.id}): {b.value!r}" for b in agent.blocks),
    ]
    _show(args, agent, "\n".join(lines))
    return 0


def agent_compile(args: argparse.Namespace, stub: state_pb2_grpc.StateServiceStub) -> int:
    """cairn agent compile"""
    response = stub.CompileContext(state_pb2.CompileContextRequest(agent_id=args.agent_id))
    t = response.tokens
    human = (
        f"{response.system_prompt}\n---\nrevision {response.memory_revision}, "
        f"{'cached' if response.cache_hit else 'compiled'}, tokens {t.total}/{t.context_window}"
    )
    _show(args, response, human)
    return 0


def _run(handler: Handler) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        key = api_key(args)
        with grpc.insecure_channel(args.addr) as channel:
            stub = Authenticated(state_pb2_grpc.StateServiceStub(channel), key)
            try:
                return handler(args, stub)
            except grpc.RpcError as error:
                code = error.code()
                details = error.details()
                if code is grpc.StatusCode.UNAVAILABLE:
                    details = (
                        f"cannot reach the state service at {args.addr}; is `cairn up` running?"
                    )
                print(f"cairn: {code.name}: {details}", file=sys.stderr)
                return 1

    return run


def add_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Adds `agent` and `block` commands."""

    def common(parser: argparse.ArgumentParser, handler: Handler) -> None:
        parser.add_argument(
            "--addr",
            default=os.environ.get("CAIRN_STATE_ADDR", "127.0.0.1:50051"),
            help="state service address (env CAIRN_STATE_ADDR)",
        )
        parser.add_argument("--api-key", help="API key (env CAIRN_API_KEY; default: admin.key)")
        parser.add_argument("--data-dir", help="where admin.key is (default ~/.cairn)")
        parser.add_argument("--json", action="store_true", help="machine-readable output")
        parser.set_defaults(func=_run(handler))

    block = sub.add_parser("block", help="memory blocks").add_subparsers(
        dest="block_command", required=True
    )
    create = block.add_parser("create", help="create a block")
    create.add_argument("--label", required=True)
    create.add_argument("--value", default="")
    create.add_argument("--description")
    create.add_argument("--limit", type=int)
    create.add_argument("--read-only", action="store_true")
    create.add_argument("-q", "--quiet", action="store_true", help="print only the new id")
    common(create, block_create)
    show = block.add_parser("show", help="show a block")
    show.add_argument("block_id")
    common(show, block_show)
    set_ = block.add_parser("set", help="update a block's fields")
    set_.add_argument("block_id")
    set_.add_argument("--value")
    set_.add_argument("--description")
    set_.add_argument("--limit", type=int)
    set_.add_argument("--label")
    set_.add_argument("--expected-version", type=int)
    common(set_, block_set)

    agent = sub.add_parser("agent", help="agents").add_subparsers(
        dest="agent_command", required=True
    )
    acreate = agent.add_parser("create", help="create an agent")
    acreate.add_argument("--name", required=True)
    acreate.add_argument("--system")
    acreate.add_argument("--model")
    acreate.add_argument("--context-window", type=int)
    acreate.add_argument("--block", action="append", help="a new block LABEL=VALUE")
    acreate.add_argument("--block-id", action="append", help="an existing block to attach")
    acreate.add_argument("--memory-mode", choices=["standard", "line_numbered"], default="standard")
    acreate.add_argument("-q", "--quiet", action="store_true", help="print only the new id")
    common(acreate, agent_create)
    ashow = agent.add_parser("show", help="show an agent")
    ashow.add_argument("agent_id")
    common(ashow, agent_show)
    acompile = agent.add_parser("compile", help="print the agent's compiled system prompt")
    acompile.add_argument("agent_id")
    common(acompile, agent_compile)
