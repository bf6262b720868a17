"""Recall service benchmark: Write vs. an empty RPC (to one stream and spread over many),
WriteBatch throughput, VerifyStream time, and inclusion-proof latency as the log grows — on
SQLite, and with `--postgres` on PostgreSQL as well.

    python -m bench.recall_bench [--duration 3] [--concurrency 32] [--rounds 3]
                                 [--big-size 1000000 | --big-size 0] [--postgres URL]

For each store, starts a recall server on a free port with a fresh data directory (and, for
PostgreSQL, a fresh schema, dropped afterwards), measures, and prints one JSON object per
line. The unary Write rate is a ratio against the health check (an empty RPC) on the same
server in the same run. The large stream for the proof latency is built before the server
starts, directly through the store with the service's own append code (sealing, chain,
incremental Merkle tree, one signed checkpoint per 10,000-record transaction) — the RPC path
adds only validation and access checks — because a million writes over gRPC would take most
of the run.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import random
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import grpc
import psycopg
from grpc_health.v1 import health_pb2, health_pb2_grpc

from bench.load import interleaved, latencies_ms, percentile
from cairn.v1 import recall_pb2, recall_pb2_grpc
from cairn_server.auth import Principal, Role, create_key
from cairn_server.keys_postgres import PostgresKeyStore
from cairn_server.keys_sqlite import SqliteKeyStore
from cairn_server.process import ServerProcess, free_port
from recall_service import merkle, proofs, streams
from recall_service.append import append_drafts
from recall_service.core import Deps
from recall_service.models import Draft, RecordKind, StreamKind
from recall_service.signing import load_or_create
from recall_service.store.base import LogStore
from recall_service.store.postgres import PostgresRecallStore
from recall_service.store.sqlite import SqliteLogStore

CONTENT = "The deploy moved to Friday; Sam takes the API, Kim reviews the migration. " * 2
BULK_CHUNK = 10_000
BIG_STREAM = "bench-big"
ADMIN = Principal("bench", "bench", Role.ADMIN)


def build_big_stream(store: LogStore, data_dir: Path, size: int) -> dict[str, Any]:
    """Appends `size` records to one stream through the store, in 10k-record transactions,
    and times in-process inclusion proofs (no gRPC) at 10k and at `size` leaves."""
    deps = Deps(store=store, signer=load_or_create(data_dir))
    streams.create_stream(deps, ADMIN, BIG_STREAM, StreamKind.CONVERSATION, "agent-0")
    start = time.perf_counter()
    written = 1
    while written < size:
        n = min(BULK_CHUNK, size - written)
        drafts = [
            Draft(RecordKind.MESSAGE, "agent-0", "admin:bench", f"{written + i} {CONTENT}")
            for i in range(n)
        ]
        with store.append("bench", BIG_STREAM) as (tx, stream):
            assert stream is not None
            append_drafts(deps, tx, stream, drafts)
        written += n
    build_s = time.perf_counter() - start
    in_process: dict[str, float] = {}
    for tree in (10_000, size):
        seqs = [random.randint(1, tree) for _ in range(300)]
        for seq in seqs[:20]:
            proofs.inclusion_proof(deps, ADMIN, BIG_STREAM, seq, tree)
        timings = []
        for seq in seqs:
            t0 = time.perf_counter()
            proofs.inclusion_proof(deps, ADMIN, BIG_STREAM, seq, tree)
            timings.append((time.perf_counter() - t0) * 1e6)
        in_process[str(tree)] = round(statistics.median(timings), 1)
    return {
        "big_stream_records": size,
        "big_stream_build_s": round(build_s, 1),
        "big_stream_records_per_s": round(size / build_s),
        "proof_us_in_process_p50": in_process,
    }


def nodes_read(size: int) -> int:
    """Stored nodes an inclusion proof reads in a tree of `size` leaves (leaf at a third)."""

    def prove(node: merkle.NodeSource) -> list[bytes]:
        return merkle.inclusion_proof(node, size // 3, size)

    return len(merkle.needed(prove))


async def run(address: str, key: str, args: argparse.Namespace) -> dict[str, Any]:
    md = (("authorization", f"Bearer {key}"),)
    async with grpc.aio.insecure_channel(address) as channel:
        stub = recall_pb2_grpc.RecallServiceStub(channel)
        health: Any = health_pb2_grpc.HealthStub(channel)  # its type stubs lack Check

        async def new_stream() -> str:
            reply = await stub.CreateStream(
                recall_pb2.CreateStreamRequest(
                    kind=recall_pb2.STREAM_KIND_CONVERSATION, owner_agent_id="agent-0"
                ),
                metadata=md,
            )
            return str(reply.stream.id)

        unary = await new_stream()
        write_request = recall_pb2.WriteRequest(
            stream_id=unary,
            entry=recall_pb2.WriteEntry(source_agent_id="agent-0", content=CONTENT, tags=["bench"]),
        )
        check = health_pb2.HealthCheckRequest()

        async def empty() -> object:
            return await health.Check(check)

        async def write() -> object:
            return await stub.Write(write_request, metadata=md)

        # The same writes spread over as many streams as there are calls in flight.
        spread = [await new_stream() for _ in range(args.concurrency)]
        spread_requests = itertools.cycle(
            [
                recall_pb2.WriteRequest(stream_id=stream_id, entry=write_request.entry)
                for stream_id in spread
            ]
        )

        async def write_spread() -> object:
            return await stub.Write(next(spread_requests), metadata=md)

        calls = {"empty": empty, "write": write, "write_spread": write_spread}
        await interleaved(calls, 1.0, args.concurrency, 1)
        rates = await interleaved(calls, args.duration, args.concurrency, args.rounds)

        batched = await new_stream()
        batch_request = recall_pb2.WriteBatchRequest(
            stream_id=batched,
            entries=[
                recall_pb2.WriteEntry(source_agent_id="agent-0", content=CONTENT)
                for _ in range(args.batch)
            ],
        )

        async def batch() -> object:
            return await stub.WriteBatch(batch_request, metadata=md)

        batch_rates = await interleaved({"batch": batch}, args.duration, 4, args.rounds)

        verified = await new_stream()
        for _ in range(10_000 // args.batch):
            await stub.WriteBatch(
                recall_pb2.WriteBatchRequest(stream_id=verified, entries=batch_request.entries),
                metadata=md,
            )
        verify_request = recall_pb2.VerifyStreamRequest(stream_id=verified)
        verdict = await stub.VerifyStream(verify_request, metadata=md)
        assert verdict.ok and verdict.size >= 10_000, verdict

        async def verify() -> object:
            return await stub.VerifyStream(verify_request, metadata=md)

        verify_ms = await latencies_ms(verify, 5)

        proof_ms: dict[str, float] = {}
        targets = [(verified, int(verdict.size))]
        if args.big_size:
            targets.append((BIG_STREAM, args.big_size))
        for stream_id, size in targets:
            seqs = iter([random.randint(1, size) for _ in range(args.proofs + 20)])

            async def prove(stream_id: str = stream_id, seqs: Any = seqs) -> object:
                return await stub.GetInclusionProof(
                    recall_pb2.GetInclusionProofRequest(stream_id=stream_id, seq=next(seqs)),
                    metadata=md,
                )

            await latencies_ms(prove, 20)
            samples = await latencies_ms(prove, args.proofs)
            proof_ms[str(size)] = round(percentile(samples, 50), 3)
    return {
        "concurrency": args.concurrency,
        "duration_s": args.duration,
        "rounds": args.rounds,
        "empty_rps": round(rates["empty"], 1),
        "write_rps": round(rates["write"], 1),
        "write_to_empty_ratio": round(rates["write"] / rates["empty"], 3),
        "write_spread_streams": args.concurrency,
        "write_spread_rps": round(rates["write_spread"], 1),
        "write_spread_to_empty_ratio": round(rates["write_spread"] / rates["empty"], 3),
        "batch_size": args.batch,
        "batch_records_per_s": round(batch_rates["batch"] * args.batch),
        "verify_ms_per_10k_p50": round(statistics.median(verify_ms) * 10_000 / verdict.size, 1),
        "verify_stream_records": verdict.size,
        "inclusion_proof_ms_p50": proof_ms,
        "proof_nodes_read": {str(size): nodes_read(size) for _, size in targets},
    }


def measure(
    name: str,
    data_dir: Path,
    store: LogStore,
    keys: SqliteKeyStore | PostgresKeyStore,
    flags: list[str],
    args: argparse.Namespace,
) -> dict[str, Any]:
    """One store's figures: the big stream built through `store`, then a server on it."""
    key, _ = create_key(keys, "bench", Role.ADMIN, "bench")
    keys.close()
    try:
        big = build_big_stream(store, data_dir, args.big_size) if args.big_size else {}
    finally:
        store.close()
    server = ServerProcess(
        "recall_service", data_dir, free_port(), ["--log-level", "warning", *flags], {}
    ).start()
    try:
        result = asyncio.run(run(server.address, key, args))
    finally:
        server.stop()
    return {"store": name, **result, **big}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--duration", type=float, default=3.0, help="seconds per round")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch", type=int, default=500, help="records per WriteBatch")
    parser.add_argument("--proofs", type=int, default=300, help="inclusion proofs per size")
    parser.add_argument(
        "--big-size", type=int, default=1_000_000, help="records in the large stream (0: skip)"
    )
    parser.add_argument(
        "--postgres",
        metavar="URL",
        help="also measure a server on this PostgreSQL (a fresh schema, dropped afterwards)",
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="cairn-bench-") as tmp:
        data_dir = Path(tmp) / "sqlite"
        data_dir.mkdir()
        figures = measure(
            "sqlite", data_dir, SqliteLogStore(data_dir), SqliteKeyStore(data_dir), [], args
        )
        print(json.dumps(figures), flush=True)
        if args.postgres:
            url: str = args.postgres
            schema = f"bench_{uuid.uuid4().hex[:12]}"
            data_dir = Path(tmp) / "postgres"
            data_dir.mkdir()
            try:
                figures = measure(
                    "postgres",
                    data_dir,
                    PostgresRecallStore(url, schema),
                    PostgresKeyStore(url, schema),
                    ["--database-url", url, "--database-schema", schema],
                    args,
                )
            finally:
                with psycopg.connect(url, autocommit=True) as conn:
                    conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'.encode())
            print(json.dumps(figures), flush=True)


if __name__ == "__main__":
    main()
