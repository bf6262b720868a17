"""MemFS benchmark: CompileContext for a MEMFS agent with 200 memory files.

    python -m bench.memfs_bench [--files 200] [--duration 3] [--concurrency 32] [--rounds 3]

In one run against one server: the RPS of the empty RPC (health check) and of
CompileContext on a cache hit, in the full view and in the PROMPT view (without the
duplicate `compiled_memory`), and their ratios; then, 50 times, a one-file commit followed
by the next CompileContext: the commit's latency (it rebuilds the stored prompt from the new
commit in its transaction) and the compile's. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from bench.load import interleaved, percentile
from cairn.v1 import state_pb2, state_pb2_grpc
from cairn_server.auth import Role, create_key
from cairn_server.keys_sqlite import SqliteKeyStore
from cairn_server.process import ServerProcess, free_port

BODY = (
    "Sam prefers short answers and concrete examples. Works on the billing service; "
    "on call every third week. Dislikes meetings before ten. "
) * 2


def memory_file(i: int, revision: int = 0) -> str:
    return f"---\ndescription: Notes on topic {i}\n---\n{BODY}(revision {revision})\n"


async def run(address: str, key: str, args: argparse.Namespace) -> dict[str, Any]:
    md = (("authorization", f"Bearer {key}"),)
    async with grpc.aio.insecure_channel(address) as channel:
        stub = state_pb2_grpc.StateServiceStub(channel)
        health: Any = health_pb2_grpc.HealthStub(channel)  # its type stubs lack Check
        agent = (
            await stub.CreateAgent(
                state_pb2.CreateAgentRequest(
                    name="memfs-bench",
                    system="You are a helpful agent.\n{CORE_MEMORY}",
                    memory_mode=state_pb2.MEMORY_MODE_MEMFS,
                ),
                metadata=md,
            )
        ).agent
        upserts = [
            state_pb2.MemoryFileWrite(
                path=f"system/topics/topic_{i:03d}.md", content=memory_file(i)
            )
            for i in range(args.files)
        ]
        await stub.CommitMemoryFiles(
            state_pb2.CommitMemoryFilesRequest(agent_id=agent.id, upserts=upserts), metadata=md
        )
        request = state_pb2.CompileContextRequest(agent_id=agent.id)
        prompt_view = state_pb2.CompileContextRequest(
            agent_id=agent.id, view=state_pb2.CONTEXT_VIEW_PROMPT
        )
        first = await stub.CompileContext(request, metadata=md)
        assert first.cache_hit and first.system_prompt.count("<projection>") == args.files
        check = health_pb2.HealthCheckRequest()

        async def empty() -> object:
            return await health.Check(check)

        async def compile_() -> object:
            return await stub.CompileContext(request, metadata=md)

        async def compile_prompt() -> object:
            return await stub.CompileContext(prompt_view, metadata=md)

        calls = {"empty": empty, "compile": compile_, "compile_prompt": compile_prompt}
        await interleaved(calls, 1.0, args.concurrency, 1)
        rates = await interleaved(calls, args.duration, args.concurrency, args.rounds)

        commit_ms: list[float] = []
        compile_ms: list[float] = []
        for n in range(1, args.commits + 1):
            start = time.perf_counter()
            reply = await stub.CommitMemoryFiles(
                state_pb2.CommitMemoryFilesRequest(
                    agent_id=agent.id,
                    upserts=[
                        state_pb2.MemoryFileWrite(
                            path=f"system/topics/topic_{n % args.files:03d}.md",
                            content=memory_file(n % args.files, n),
                        )
                    ],
                ),
                metadata=md,
            )
            middle = time.perf_counter()
            context = await stub.CompileContext(request, metadata=md)
            end = time.perf_counter()
            assert reply.prompt_rebuilt and context.memory_revision == reply.revision
            assert f"(revision {n})" in context.system_prompt
            commit_ms.append((middle - start) * 1000)
            compile_ms.append((end - middle) * 1000)
    return {
        "files": args.files,
        "concurrency": args.concurrency,
        "duration_s": args.duration,
        "rounds": args.rounds,
        "prompt_chars": len(first.system_prompt),
        "empty_rps": round(rates["empty"], 1),
        "compile_hit_rps": round(rates["compile"], 1),
        "compile_hit_to_empty_ratio": round(rates["compile"] / rates["empty"], 3),
        "compile_hit_prompt_view_rps": round(rates["compile_prompt"], 1),
        "compile_hit_prompt_view_to_empty_ratio": round(
            rates["compile_prompt"] / rates["empty"], 3
        ),
        "commit_one_file_ms_p50": round(percentile(commit_ms, 50), 2),
        "commit_one_file_ms_p95": round(percentile(commit_ms, 95), 2),
        "compile_after_commit_ms_p50": round(percentile(compile_ms, 50), 2),
        "compile_after_commit_ms_p95": round(percentile(compile_ms, 95), 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--files", type=int, default=200)
    parser.add_argument("--duration", type=float, default=3.0)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--commits", type=int, default=50)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="cairn-bench-") as tmp:
        data_dir = Path(tmp)
        store = SqliteKeyStore(data_dir)
        key, _ = create_key(store, "bench", Role.ADMIN)
        store.close()
        server = ServerProcess(
            "state_service", data_dir, free_port(), ["--log-level", "warning"], {}
        ).start()
        try:
            result = asyncio.run(run(server.address, key, args))
        finally:
            server.stop()
    print(json.dumps(result))


if __name__ == "__main__":
    main()
