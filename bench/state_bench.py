"""State service benchmark: CompileContext vs. an empty RPC, and shared-block fan-out.

    python -m bench.state_bench [--duration 3] [--concurrency 32] [--rounds 3]

Starts a state server on a free port with a fresh data directory, measures, prints one
JSON object: the empty RPC, CompileContext on a cache hit (no messages, and with a
200-message window), CommitStep of a two-message step (each worker on its own agent), and
UpdateBlock latency by fan-out. Speeds are ratios against the health check (an empty RPC)
on the same server in the same run, so a noisy machine moves both sides alike.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import tempfile
import uuid
from itertools import cycle
from pathlib import Path
from typing import Any

import grpc
import psycopg
from google.protobuf import field_mask_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc

from bench.load import interleaved, latencies_ms, percentile
from cairn.v1 import common_pb2, state_pb2, state_pb2_grpc
from cairn_server.auth import Role, create_key
from cairn_server.keys_postgres import PostgresKeyStore
from cairn_server.keys_sqlite import SqliteKeyStore
from cairn_server.process import ServerProcess, free_port

FANOUTS = (1, 10, 100, 1000)
WINDOW_MESSAGES = 200
USER_TEXT = "Could you remind me what we decided about the trip to Lisbon next month?"
ASSISTANT_TEXT = (
    "We agreed to fly out on the 12th, stay four nights near Alfama, and keep one day free "
    "for Sintra. You wanted me to check train times closer to the date."
)
PERSONA = "I am a careful assistant. " * 20
HUMAN = "Name: Sam. Likes tea, hiking and long walks. Works as a nurse. " * 5


async def _create_agents(
    stub: state_pb2_grpc.StateServiceAsyncStub, md: Any, block_id: str, n: int
) -> None:
    sem = asyncio.Semaphore(16)

    async def one(i: int) -> None:
        async with sem:
            await stub.CreateAgent(
                state_pb2.CreateAgentRequest(
                    name=f"fan-{block_id[-6:]}-{i}",
                    system="You are a helpful agent.\n{CORE_MEMORY}",
                    memory_blocks=[state_pb2.Block(label="persona", value=PERSONA)],
                    block_ids=[block_id],
                ),
                metadata=md,
            )

    await asyncio.gather(*(one(i) for i in range(n)))


async def _agent_with_window(
    stub: state_pb2_grpc.StateServiceAsyncStub, md: Any, messages: int
) -> str:
    agent = (
        await stub.CreateAgent(
            state_pb2.CreateAgentRequest(
                name="window",
                system="You are a helpful agent.\n{CORE_MEMORY}",
                memory_blocks=[
                    state_pb2.Block(label="persona", value=PERSONA),
                    state_pb2.Block(label="human", value=HUMAN),
                ],
            ),
            metadata=md,
        )
    ).agent
    version = 1
    for i in range(messages // 2):
        reply = await stub.CommitStep(
            state_pb2.CommitStepRequest(
                agent_id=agent.id,
                step_id=f"w{i}",
                base_context_version=version,
                messages=[
                    common_pb2.Message(role=common_pb2.MESSAGE_ROLE_USER, content=USER_TEXT),
                    common_pb2.Message(
                        role=common_pb2.MESSAGE_ROLE_ASSISTANT, content=ASSISTANT_TEXT
                    ),
                ],
            ),
            metadata=md,
        )
        version = reply.context_version
    return agent.id


async def run(addresses: list[str], key: str, args: argparse.Namespace) -> dict[str, Any]:
    md = (("authorization", f"Bearer {key}"),)
    channels = [grpc.aio.insecure_channel(address) for address in addresses]
    try:
        return await _run(channels, md, args)
    finally:
        for channel in channels:
            await channel.close()


async def _run(
    channels: list[grpc.aio.Channel], md: Any, args: argparse.Namespace
) -> dict[str, Any]:
    # Calls spread round-robin over the servers; setup goes through the first.
    stubs = cycle([state_pb2_grpc.StateServiceStub(c) for c in channels])
    checks: Any = cycle([health_pb2_grpc.HealthStub(c) for c in channels])  # stubs lack Check
    stub = state_pb2_grpc.StateServiceStub(channels[0])
    agent = (
        await stub.CreateAgent(
            state_pb2.CreateAgentRequest(
                name="bench",
                system="You are a helpful agent.\n{CORE_MEMORY}",
                memory_blocks=[
                    state_pb2.Block(label="persona", value=PERSONA),
                    state_pb2.Block(label="human", value=HUMAN),
                ],
            ),
            metadata=md,
        )
    ).agent
    compile_request = state_pb2.CompileContextRequest(agent_id=agent.id)
    check = health_pb2.HealthCheckRequest()
    reply = await stub.CompileContext(compile_request, metadata=md)
    assert reply.cache_hit, "the bench agent's prompt should be cached"

    async def empty() -> object:
        return await next(checks).Check(check)

    async def compile_() -> object:
        return await next(stubs).CompileContext(compile_request, metadata=md)

    window_agent = await _agent_with_window(stub, md, WINDOW_MESSAGES)
    window_request = state_pb2.CompileContextRequest(agent_id=window_agent)
    reply = await stub.CompileContext(window_request, metadata=md)
    assert len(reply.messages) == WINDOW_MESSAGES, len(reply.messages)

    async def compile_window() -> object:
        return await next(stubs).CompileContext(window_request, metadata=md)

    step_agents = [
        (
            await stub.CreateAgent(state_pb2.CreateAgentRequest(name=f"steps-{i}"), metadata=md)
        ).agent.id
        for i in range(args.concurrency)
    ]
    versions = dict.fromkeys(step_agents, 1)
    counter = 0

    async def commit_step(agent_ids: list[str] = step_agents) -> object:
        # Each worker owns one agent, so concurrent steps never contend for a window.
        nonlocal counter
        counter += 1
        agent_id = agent_ids.pop()
        try:
            reply = await next(stubs).CommitStep(
                state_pb2.CommitStepRequest(
                    agent_id=agent_id,
                    step_id=f"step-{counter}",
                    base_context_version=versions[agent_id],
                    messages=[
                        common_pb2.Message(role=common_pb2.MESSAGE_ROLE_USER, content=USER_TEXT),
                        common_pb2.Message(
                            role=common_pb2.MESSAGE_ROLE_ASSISTANT, content=ASSISTANT_TEXT
                        ),
                    ],
                ),
                metadata=md,
            )
            versions[agent_id] = reply.context_version
            return reply
        finally:
            agent_ids.append(agent_id)

    calls = {
        "empty": empty,
        "compile": compile_,
        "compile_window": compile_window,
        "commit_step": commit_step,
    }
    await interleaved(calls, 1.0, args.concurrency, 1)
    rates = await interleaved(calls, args.duration, args.concurrency, args.rounds)

    p50: dict[str, float] = {}
    p95: dict[str, float] = {}
    for n in FANOUTS:
        shared = (
            await stub.CreateBlock(
                state_pb2.CreateBlockRequest(block=state_pb2.Block(label="human", value="v")),
                metadata=md,
            )
        ).block
        await _create_agents(stub, md, shared.id, n)
        counter = 0

        async def update(block_id: str = shared.id, n: int = n) -> object:
            nonlocal counter
            counter += 1
            result = await stub.UpdateBlock(
                state_pb2.UpdateBlockRequest(
                    block=state_pb2.Block(id=block_id, value=f"{HUMAN[:200]} #{counter}"),
                    update_mask=field_mask_pb2.FieldMask(paths=["value"]),
                ),
                metadata=md,
            )
            assert len(result.rebuilt_agent_ids) == n
            return result

        await latencies_ms(update, 3)
        samples = await latencies_ms(update, args.updates)
        p50[str(n)] = round(percentile(samples, 50), 2)
        p95[str(n)] = round(percentile(samples, 95), 2)
    return {
        "store": "postgres" if args.postgres else "sqlite",
        "servers": args.servers,
        "concurrency": args.concurrency,
        "duration_s": args.duration,
        "rounds": args.rounds,
        "empty_rps": round(rates["empty"], 1),
        "compile_rps": round(rates["compile"], 1),
        "compile_to_empty_ratio": round(rates["compile"] / rates["empty"], 3),
        "window_messages": WINDOW_MESSAGES,
        "compile_window_rps": round(rates["compile_window"], 1),
        "compile_window_to_empty_ratio": round(rates["compile_window"] / rates["empty"], 3),
        "commit_step_rps": round(rates["commit_step"], 1),
        "commit_step_to_empty_ratio": round(rates["commit_step"] / rates["empty"], 3),
        "update_shared_ms_p50": p50,
        "update_shared_ms_p95": p95,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--duration", type=float, default=3.0, help="seconds per round")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--updates", type=int, default=50, help="UpdateBlock calls per fan-out")
    parser.add_argument("--postgres", help="PostgreSQL URL: run the servers on it (a fresh schema)")
    parser.add_argument(
        "--servers", type=int, default=1, help="server processes (needs --postgres)"
    )
    args = parser.parse_args()
    if args.servers > 1 and not args.postgres:
        parser.error("several servers share one store only over PostgreSQL: pass --postgres")
    schema = f"bench_{uuid.uuid4().hex[:10]}"
    flags = ["--log-level", "warning"]
    if args.postgres:
        flags += ["--database-url", args.postgres, "--database-schema", schema]
    with tempfile.TemporaryDirectory(prefix="cairn-bench-") as tmp:
        data_dir = Path(tmp)
        store: Any = (
            PostgresKeyStore(args.postgres, schema) if args.postgres else SqliteKeyStore(data_dir)
        )
        key, _ = create_key(store, "bench", Role.ADMIN)
        store.close()
        servers: list[ServerProcess] = []
        try:
            for _ in range(args.servers):
                servers.append(ServerProcess("state_service", data_dir, free_port(), flags, {}))
                servers[-1].start()
            result = asyncio.run(run([s.address for s in servers], key, args))
        finally:
            for server in servers:
                try:
                    server.stop()
                except subprocess.TimeoutExpired:
                    server.kill()
            if args.postgres:
                with psycopg.connect(args.postgres, autocommit=True) as conn:
                    conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'.encode())
    print(json.dumps(result))


if __name__ == "__main__":
    main()
