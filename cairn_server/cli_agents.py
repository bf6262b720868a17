"""`cairn agent ...` and `cairn block ...`: the state service from a shell."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from rich.progress import Progress

import cairn
from cairn_server.cli_common import add_connection_flags, emit, fail


def _block_line(block: cairn.Block) -> str:
    return (
        f"{block.id}  label={block.label}  version={block.version}  "
        f"chars={len(block.value)}/{block.limit}\n{block.value}"
    )


def block_create(args: argparse.Namespace, client: cairn.Client) -> int:
    """cairn block create"""
    block = client.state.create_block(
        args.label,
        args.value,
        description=args.description or "",
        limit=args.limit or 0,
        read_only=args.read_only,
        tags=args.tag or (),
    )
    if args.quiet:
        print(block.id)
    else:
        emit(args, _block_line(block), block)
    return 0


def block_show(args: argparse.Namespace, client: cairn.Client) -> int:
    """cairn block show"""
    block = client.state.get_block(args.block_id)
    emit(args, _block_line(block), block)
    return 0


def block_set(args: argparse.Namespace, client: cairn.Client) -> int:
    """cairn block set"""
    changes: dict[str, Any] = {
        name: getattr(args, name)
        for name in ("value", "description", "limit", "label")
        if getattr(args, name) is not None
    }
    if not changes:
        return fail("nothing to set; pass --value, --description, --limit or --label")
    update = client.state.update_block(
        args.block_id, expected_version=args.expected_version, **changes
    )
    rebuilt = update.rebuilt_agent_ids
    human = _block_line(update.block) + (
        f"\nrebuilt prompts of {len(rebuilt)} agent(s): {', '.join(rebuilt)}" if rebuilt else ""
    )
    emit(args, human, update)
    return 0


def block_list(args: argparse.Namespace, client: cairn.Client) -> int:
    """cairn block list"""
    blocks = list(client.state.list_blocks(label=args.label or "", tags=args.tag or ()))
    human = "\n".join(f"{b.id}  {b.label:<20} v{b.version}  {len(b.value)} chars" for b in blocks)
    emit(args, human or "no blocks", {"blocks": blocks})
    return 0


def _agent_line(agent: cairn.Agent) -> str:
    lines = [
        f"{agent.id}  name={agent.name}  version={agent.version}  "
        f"memory_revision={agent.memory_revision}  mode={agent.memory_mode.value}",
        *(f"  block {b.label} ({b.id}): {b.value!r}" for b in agent.blocks),
    ]
    return "\n".join(lines)


def agent_create(args: argparse.Namespace, client: cairn.Client) -> int:
    """cairn agent create"""
    blocks = []
    for spec in args.block or []:
        label, sep, value = spec.partition("=")
        if not sep:
            return fail(f"--block takes LABEL=VALUE, got {spec!r}")
        blocks.append(cairn.BlockSpec(label=label, value=value))
    agent = client.state.create_agent(
        args.name,
        system=args.system or "",
        model=args.model or "",
        context_window=args.context_window or 0,
        blocks=blocks,
        block_ids=args.block_id or (),
        tags=args.tag or (),
        memory_mode=cairn.MemoryMode(args.memory_mode),
    )
    if args.quiet:
        print(agent.id)
    else:
        emit(args, _agent_line(agent), agent)
    return 0


def agent_show(args: argparse.Namespace, client: cairn.Client) -> int:
    """cairn agent show"""
    agent = client.state.get_agent(args.agent_id)
    emit(args, _agent_line(agent), agent)
    return 0


def agent_list(args: argparse.Namespace, client: cairn.Client) -> int:
    """cairn agent list"""
    agents = list(client.state.list_agents(tags=args.tag or (), name=args.name or ""))
    human = "\n".join(f"{a.id}  {a.name:<24} rev {a.memory_revision}" for a in agents)
    emit(args, human or "no agents", {"agents": agents})
    return 0


def agent_compile(args: argparse.Namespace, client: cairn.Client) -> int:
    """cairn agent compile"""
    context = client.state.compile_context(args.agent_id, force_recompile=args.force)
    t = context.tokens
    human = (
        f"{context.system_prompt}\n---\nrevision {context.memory_revision}, "
        f"{'cached' if context.cache_hit else 'compiled'}, {len(context.messages)} messages, "
        f"tokens {t.total}/{t.context_window} ({context.status.value})"
    )
    emit(args, human, context)
    return 0


def agent_export(args: argparse.Namespace, client: cairn.Client) -> int:
    """cairn agent export"""
    document = client.state.export_agent(args.agent_ids)
    if args.output:
        Path(args.output).write_text(document)
        emit(
            args,
            f"exported {len(args.agent_ids)} agent(s) to {args.output}",
            {"path": args.output, "agents": len(args.agent_ids)},
        )
    else:
        sys.stdout.write(document + "\n")
    return 0


def agent_import(args: argparse.Namespace, client: cairn.Client) -> int:
    """cairn agent import"""
    imported: list[cairn.Agent] = []
    ids: dict[str, str] = {}
    with Progress(transient=True, disable=args.json or not sys.stderr.isatty()) as progress:
        task = progress.add_task("importing", total=len(args.files))
        for path in args.files:
            result = client.state.import_agent(Path(path).read_text())
            imported += result.agents
            ids.update(result.id_map)
            progress.advance(task)
    human = "\n".join(f"{a.id}  {a.name}" for a in imported)
    emit(args, human, {"agents": imported, "id_map": ids})
    return 0


def add_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Adds `agent` and `block` commands."""
    block = sub.add_parser("block", help="memory blocks").add_subparsers(
        dest="block_command", required=True
    )
    create = block.add_parser("create", help="create a block")
    create.add_argument("--label", required=True)
    create.add_argument("--value", default="")
    create.add_argument("--description")
    create.add_argument("--limit", type=int)
    create.add_argument("--read-only", action="store_true")
    create.add_argument("--tag", action="append")
    create.add_argument("-q", "--quiet", action="store_true", help="print only the new id")
    add_connection_flags(create, block_create)
    show = block.add_parser("show", help="show a block")
    show.add_argument("block_id")
    add_connection_flags(show, block_show)
    set_ = block.add_parser("set", help="update a block's fields (rebuilds attached agents)")
    set_.add_argument("block_id")
    set_.add_argument("--value")
    set_.add_argument("--description")
    set_.add_argument("--limit", type=int)
    set_.add_argument("--label")
    set_.add_argument("--expected-version", type=int)
    add_connection_flags(set_, block_set)
    listing = block.add_parser("list", help="list blocks")
    listing.add_argument("--label")
    listing.add_argument("--tag", action="append")
    add_connection_flags(listing, block_list)

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
    acreate.add_argument("--tag", action="append")
    acreate.add_argument(
        "--memory-mode", choices=["standard", "line_numbered", "memfs"], default="standard"
    )
    acreate.add_argument("-q", "--quiet", action="store_true", help="print only the new id")
    add_connection_flags(acreate, agent_create)
    ashow = agent.add_parser("show", help="show an agent")
    ashow.add_argument("agent_id")
    add_connection_flags(ashow, agent_show)
    alist = agent.add_parser("list", help="list agents")
    alist.add_argument("--tag", action="append")
    alist.add_argument("--name")
    add_connection_flags(alist, agent_list)
    acompile = agent.add_parser("compile", help="print the agent's compiled context")
    acompile.add_argument("agent_id")
    acompile.add_argument("--force", action="store_true", help="recompile even on a cache hit")
    add_connection_flags(acompile, agent_compile)
    aexport = agent.add_parser("export", help="write agents as one agent file")
    aexport.add_argument("agent_ids", nargs="+")
    aexport.add_argument("-o", "--output", help="file to write (default: stdout)")
    add_connection_flags(aexport, agent_export)
    aimport = agent.add_parser("import", help="import agent files (fresh ids)")
    aimport.add_argument("files", nargs="+")
    add_connection_flags(aimport, agent_import)
