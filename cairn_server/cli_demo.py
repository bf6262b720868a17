"""`cairn demo`: the whole idea in a minute, against running services.

Two agents share a memory block and a conversation. One edits the block through a memory
tool and the other's next prompt shows it; both write to the conversation; a hybrid search
finds a turn by what it means; the stream verifies against a checkpoint kept along the way,
recomputed here from the records without trusting the server.
"""

from __future__ import annotations

import argparse
import uuid
from collections.abc import Callable
from typing import Any

import cairn
from cairn import verify
from cairn.protobuf_values import to_timestamp
from cairn.v1 import recall_pb2
from cairn_server.cli_common import add_connection_flags, emit, fail

PLAN = "Launch: Friday 12 December, at the Old Mill."
OLD, NEW = "Friday 12 December", "Monday 15 December"
TURNS = (
    ("planner", "The Old Mill is flooded, so the launch moves to Monday the 15th."),
    ("writer", "Understood. I will rewrite the press release for Monday and resend it."),
    ("planner", "Also book the caterers for Monday; Friday's order can be cancelled."),
)
QUESTION = "why did the launch date change?"


class DemoFailed(Exception):
    """A step did not show what it should: the services are not doing their job."""


def _line_with(text: str, needle: str) -> str:
    return next((line.strip() for line in text.splitlines() if needle in line), "")


def run_demo(client: cairn.Client, say: Callable[[str], None]) -> dict[str, Any]:
    """Runs every step, narrating through `say`; returns what each step showed."""
    run = uuid.uuid4().hex[:6]
    shared = client.state.create_block("launch_plan", PLAN, description="The team's launch plan.")
    planner = client.state.create_agent(f"planner-{run}", block_ids=[shared.id])
    writer = client.state.create_agent(f"writer-{run}", block_ids=[shared.id])
    names = {"planner": planner.id, "writer": writer.id}
    say(
        f"1. Two agents share the block `launch_plan` ({shared.id}):\n"
        f"   planner {planner.id}, writer {writer.id}"
    )

    before = client.state.compile_context(writer.id)
    say(f"2. The writer's prompt shows: {_line_with(before.system_prompt, 'Launch:')}")

    edit = client.state.execute_memory_tool(
        planner.id,
        "core_memory_replace",
        {"label": "launch_plan", "old_content": OLD, "new_content": NEW},
    )
    if not edit.ok:
        raise DemoFailed(f"the memory tool refused the edit: {edit.result}")
    say(
        f"3. The planner's model calls core_memory_replace('{OLD}' -> '{NEW}'):\n"
        f"   {edit.result.split('. ')[0]}.\n"
        f"   prompts rebuilt for {len(edit.rebuilt_agent_ids)} agents"
    )

    after = client.state.compile_context(writer.id)
    shown = _line_with(after.system_prompt, "Launch:")
    if NEW not in shown:
        raise DemoFailed(f"the writer's prompt does not show the edit: {shown!r}")
    say(
        f"4. The writer's next prompt shows: {shown}\n"
        f"   (memory revision {before.memory_revision[:12]} -> {after.memory_revision[:12]})"
    )

    stream = client.recall.create_stream(cairn.StreamKind.CONVERSATION, stream_id=f"launch-{run}")
    stream_id = stream.stream.id
    for agent_id in names.values():
        client.recall.attach(stream_id, agent_id, cairn.ParticipantRole.WRITER)
    written = [client.recall.write(stream_id, TURNS[0][1], source_agent_id=names[TURNS[0][0]])]
    kept = client.recall.get_checkpoint(stream_id).to_proto()
    for speaker, text in TURNS[1:]:
        written.append(client.recall.write(stream_id, text, source_agent_id=names[speaker]))
    lines = [
        f"   #{w.record.seq} {speaker}: {w.record.content}"
        for (speaker, _), w in zip(TURNS, written, strict=True)
    ]
    say(
        f"5. Both write to the conversation {stream_id}:\n"
        + "\n".join(lines)
        + f"\n   (a signed checkpoint was kept after the first turn, at size {kept.size})"
    )
    first, last = written[0].record.seq, written[-1].record.seq

    hits = client.recall.search(
        QUESTION, stream_ids=[stream_id], min_seq={stream_id: last}, top_k=3
    )
    if not hits or hits[0].record.seq != first:
        found = [h.record.seq for h in hits]
        raise DemoFailed(f"the search for {QUESTION!r} ranked records {found}, not #{first}")
    top = hits[0]
    say(
        f'6. A hybrid search for "{QUESTION}" finds #{top.record.seq} first '
        f"(score {top.score:.3f}; lexical rank {top.lexical_rank or '-'}, "
        f"vector rank {top.vector_rank or '-'}):\n   {top.record.content}"
    )

    info = client.recall.get_stream(stream_id)
    key = client.recall.get_public_key()
    latest = client.recall.get_checkpoint(stream_id).to_proto()
    kind = recall_pb2.StreamKind.Value(f"STREAM_KIND_{info.kind.name}")
    genesis = verify.genesis_hash(info.tenant, info.id, kind, to_timestamp(info.created_at))
    records = [r.to_proto() for r in client.recall.read(stream_id, include_events=True)]
    for checkpoint in (kept, latest):
        try:
            verify.verify_log(records, genesis, checkpoint, key.public_key)
        except verify.VerificationError as error:
            raise DemoFailed(
                f"the stream does not verify at size {checkpoint.size}: {error}"
            ) from None
    say(
        f"7. The stream verifies here, without trusting the server: {len(records)} records "
        f"re-hashed into the chain and Merkle root, the latest checkpoint (size {latest.size}) "
        f"signed by key {latest.key_id}, and the log still extends the checkpoint kept at "
        f"size {kept.size}."
    )
    return {
        "block_id": shared.id,
        "agents": names,
        "prompt_before": _line_with(before.system_prompt, "Launch:"),
        "prompt_after": shown,
        "rebuilt_agent_ids": sorted(edit.rebuilt_agent_ids),
        "stream_id": stream_id,
        "records": [
            {"seq": w.record.seq, "source_agent_id": w.record.source_agent_id} for w in written
        ],
        "search": {
            "query": QUESTION,
            "hits": [
                {
                    "seq": h.record.seq,
                    "score": h.score,
                    "lexical_rank": h.lexical_rank,
                    "vector_rank": h.vector_rank,
                }
                for h in hits
            ],
        },
        "verified": {"records": len(records), "latest_size": latest.size, "kept_size": kept.size},
    }


def demo(args: argparse.Namespace, client: cairn.Client) -> int:
    """cairn demo"""
    quiet = bool(args.json)
    try:
        result = run_demo(client, (lambda _text: None) if quiet else print)
    except DemoFailed as error:
        return fail(f"demo failed: {error}", 1)
    emit(args, "Done: that is Cairn.", {"ok": True, **result})
    return 0


def add_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Adds `demo`."""
    parser = sub.add_parser(
        "demo", help="two agents share memory and a conversation, step by step (needs `cairn up`)"
    )
    add_connection_flags(parser, demo)
