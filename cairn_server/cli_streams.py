"""`cairn stream ...`: shared recall streams from a shell, and client-side verification."""

from __future__ import annotations

import argparse
import base64
import json
import sys
from datetime import datetime
from pathlib import Path

from rich.progress import Progress

import cairn
from cairn import verify
from cairn.protobuf_values import to_timestamp
from cairn.v1 import recall_pb2
from cairn_server.cli_common import add_connection_flags, emit


def _record_line(record: cairn.Record) -> str:
    who = record.source_agent_id or record.written_by
    when = (record.occurred_at or record.created_at).strftime("%Y-%m-%d %H:%M:%S")
    if record.kind is not cairn.RecordKind.MESSAGE:
        subject = record.subject_agent_id or record.target_seq
        return f"#{record.seq} {when} [{record.kind.value}] {subject}"
    return f"#{record.seq} {when} {who}: {record.content}"


def _said_time(text: str) -> datetime:
    """An ISO 8601 time with its zone (`--occurred-at`)."""
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an ISO 8601 time: {text!r}") from None
    if value.tzinfo is None:
        raise argparse.ArgumentTypeError(
            f"{text!r} has no time zone: add one (Z for UTC, or +01:00 and the like)"
        )
    return value


def stream_create(args: argparse.Namespace, client: cairn.Client) -> int:
    """cairn stream create"""
    created = client.recall.create_stream(
        cairn.StreamKind(args.kind), stream_id=args.stream_id or "", owner_agent_id=args.owner or ""
    )
    emit(args, created.stream.id, created)
    return 0


def stream_attach(args: argparse.Namespace, client: cairn.Client) -> int:
    """cairn stream attach"""
    attached = client.recall.attach(args.stream_id, args.agent_id, cairn.ParticipantRole(args.role))
    emit(args, f"attached {args.agent_id} as {args.role} to {args.stream_id}", attached)
    return 0


def stream_write(args: argparse.Namespace, client: cairn.Client) -> int:
    """cairn stream write"""
    content = args.content if args.content is not None else sys.stdin.read()
    written = client.recall.write(
        args.stream_id,
        content,
        source_agent_id=args.as_agent or "",
        tags=args.tag or (),
        idempotency_key=args.idempotency_key or "",
        occurred_at=args.occurred_at,
    )
    emit(args, _record_line(written.record), written)
    return 0


def stream_read(args: argparse.Namespace, client: cairn.Client) -> int:
    """cairn stream read"""
    records = []
    for record in client.recall.read(
        args.stream_id,
        source_agent_ids=args.from_agent or (),
        tags=args.tag or (),
        include_events=args.events,
        newest_first=args.newest_first,
    ):
        records.append(record)
        if args.limit and len(records) >= args.limit:
            break
    emit(args, "\n".join(_record_line(r) for r in records) or "no records", {"records": records})
    return 0


def _load_checkpoint(path: str) -> recall_pb2.Checkpoint:
    raw = json.loads(Path(path).read_text())
    return recall_pb2.Checkpoint.FromString(base64.b64decode(raw["checkpoint"]))


def stream_verify(args: argparse.Namespace, client: cairn.Client) -> int:
    """cairn stream verify: recompute the chain and Merkle root from the records themselves,
    check the signed checkpoint with the service's public key, and (with --checkpoint)
    check that the log still extends a checkpoint kept earlier. Nothing the server says
    about its own log is trusted."""
    stream = client.recall.get_stream(args.stream_id)
    key = client.recall.get_public_key()
    checkpoint = client.recall.get_checkpoint(args.stream_id).to_proto()
    kind = recall_pb2.StreamKind.Value(f"STREAM_KIND_{stream.kind.name}")
    genesis = verify.genesis_hash(stream.tenant, stream.id, kind, to_timestamp(stream.created_at))
    records: list[recall_pb2.Record] = []
    show = not args.json and sys.stderr.isatty()
    with Progress(transient=True, disable=not show) as progress:
        task = progress.add_task(f"reading {stream.id}", total=checkpoint.size)
        for record in client.recall.read(stream.id, include_events=True, page_size=1000):
            records.append(record.to_proto())
            progress.advance(task)
    problems: list[str] = []
    if genesis != stream.genesis:
        problems.append("the stream's genesis does not match its tenant, id, kind and time")
    kept = _load_checkpoint(args.checkpoint) if args.checkpoint else None
    for name, trusted in (("latest checkpoint", checkpoint), ("kept checkpoint", kept)):
        if trusted is None:
            continue
        try:
            verify.verify_log(records, genesis, trusted, key.public_key)
        except verify.VerificationError as error:
            where = f" (first bad seq {error.seq})" if error.seq else ""
            problems.append(f"{name} at size {trusted.size}: {error}{where}")
    if args.save_checkpoint:
        Path(args.save_checkpoint).write_text(
            json.dumps({"checkpoint": base64.b64encode(checkpoint.SerializeToString()).decode()})
            + "\n"
        )
    result = {
        "stream_id": stream.id,
        "ok": not problems,
        "records": len(records),
        "checkpoint_size": checkpoint.size,
        "root": checkpoint.root.hex(),
        "chain_head": checkpoint.chain_head.hex(),
        "problems": problems,
    }
    if problems:
        emit(args, "FAILED\n" + "\n".join(f"- {p}" for p in problems), result)
        return 1
    emit(
        args,
        f"ok: {len(records)} records, chain and Merkle root recomputed, checkpoint at size "
        f"{checkpoint.size} signed by key {checkpoint.key_id}"
        + (f"; extends the checkpoint kept at size {kept.size}" if kept is not None else ""),
        result,
    )
    return 0


def add_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Adds `stream` commands."""
    stream = sub.add_parser("stream", help="shared recall streams").add_subparsers(
        dest="stream_command", required=True
    )
    create = stream.add_parser("create", help="create a stream")
    create.add_argument(
        "--kind", choices=["conversation", "archival", "messages"], default="conversation"
    )
    create.add_argument("--stream-id")
    create.add_argument("--owner", help="agent attached as OWNER")
    add_connection_flags(create, stream_create)
    attach = stream.add_parser("attach", help="attach an agent")
    attach.add_argument("stream_id")
    attach.add_argument("agent_id")
    attach.add_argument("--role", choices=["reader", "writer", "owner"], default="writer")
    add_connection_flags(attach, stream_attach)
    write = stream.add_parser("write", help="append a message (content from --content or stdin)")
    write.add_argument("stream_id")
    write.add_argument("--content")
    write.add_argument("--as", dest="as_agent", help="the participant the message speaks for")
    write.add_argument("--tag", action="append")
    write.add_argument("--idempotency-key")
    write.add_argument(
        "--occurred-at",
        type=_said_time,
        help="when the message was said, for history written after the fact "
        "(ISO 8601 with a zone, e.g. 2023-05-08T13:56:00Z)",
    )
    add_connection_flags(write, stream_write)
    read = stream.add_parser("read", help="read messages in log order")
    read.add_argument("stream_id")
    read.add_argument("--from", dest="from_agent", action="append", help="only by this agent")
    read.add_argument("--tag", action="append")
    read.add_argument("--limit", type=int)
    read.add_argument("--events", action="store_true", help="include attach/detach/redaction")
    read.add_argument("--newest-first", action="store_true")
    add_connection_flags(read, stream_read)
    check = stream.add_parser("verify", help="verify a stream without trusting the server")
    check.add_argument("stream_id")
    check.add_argument("--checkpoint", help="a checkpoint kept earlier (--save-checkpoint)")
    check.add_argument("--save-checkpoint", help="keep the latest signed checkpoint in this file")
    add_connection_flags(check, stream_verify)
