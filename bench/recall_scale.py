"""Search at scale, through the real gRPC API: N records in one tenant, then sustained unary
writes with the indexer keeping up, then `Search` latency, memory and disk.

    python -m bench.recall_scale [--records 100000] [--streams 100] [--write-seconds 20]
        [--queries 300] [--dataset ../shared/data/locomo-dev.json] [--postgres URL]
        [--other-tenant-records 0] [--index-inline] [--event-loop uvloop|asyncio]
        [--in-flight 32]

With `--index-inline` the server indexes and searches in its own process (its
`--index-inline`), for comparison with the search process it starts otherwise;
`--event-loop` chooses the server's loop (its `--event-loop`, uvloop unless told).

1. **Load**: N records (two LoCoMo turns each, as `bench.projections_bench` writes them) over
   `--streams` streams of one tenant, by `WriteBatch` of 1,000; then a `Search` with every
   stream's last seq as `min_seq` waits until the indexes hold everything (indexing rate).
   With `--other-tenant-records N`, a second tenant writes N more records (1,000 per stream)
   into the same indexes first, so that they hold more than the measured tenant's streams.
   The server builds the vector index's search graph once writes pause (Qdrant Edge's
   `optimize`, in its child process); the bench waits for it, searching one stream every
   0.2 s meanwhile (how the server answers during the build).
2. **Sustained unary writes**, against the server as deployed (no access log; with
   `--write-access-log` the load and the writes are served with it too): first the
   baseline, `--in-flight` (32) `GetStream` calls in flight for `--write-seconds` (a call
   that reads one row: what gRPC and this client allow);
   then as many `Write` calls in flight as long, spread over the streams, and their ratio to
   the baseline. The index lag (`cairn_index_lag_records` from /metrics) is sampled every
   0.5 s, and after the last write a `min_seq` search measures how long the indexes take to
   catch up. Both phases report each process's CPU milliseconds per call (`cpu_ms_per_call`:
   the server, its search process, the Edge worker, this client, and their total), from
   /proc and `getrusage`: on a machine of few cores, where the writes/s go.
3. **Search**, on the same data directory served again with the access log (`--access-log`):
   `--queries` LoCoMo questions, sequentially, over one stream, ten streams and all
   streams, in each mode; client-side round trips and server-side times (the access log's
   `ms`, measured around the servicer by the RPC guard). Two passes with different questions
   and streams: the first meets the caches as the restart left them (cold segments, pages
   not yet read), the second is the steady state. Then the same number of
   `GetStream` calls, the baseline of this run: an RPC that reads one row.
4. The server's RSS (with its search process and that one's Edge worker) and the disk used
   by the log and by each index.

Prints one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import resource
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import psycopg

import cairn
from bench.load import percentile
from bench.locomo import server_call_ms
from bench.locomo_data import load, turn_content
from cairn.async_client import AsyncClient
from cairn.enums import ParticipantRole, StreamKind
from cairn.recall_types import WriteEntry
from cairn_server import event_loop
from cairn_server.auth import Role, create_key
from cairn_server.keys_postgres import PostgresKeyStore
from cairn_server.keys_sqlite import SqliteKeyStore
from cairn_server.process import ServerProcess, free_port
from recall_service.indexer import IndexerSettings

TENANT = "scale"
OTHER_TENANT = "scale-other"
OPTIMIZE_AFTER = IndexerSettings().optimize_after
AUTHORS = ("ana", "bo", "cy")


def texts(dataset: Path, n: int, seed: int = 7) -> tuple[list[str], list[str]]:
    """N record texts (pairs of turns) and the question texts."""
    conversations, _ = load(dataset)
    turns = [turn_content(t) for c in conversations for t in c.turns]
    questions = [q.question for c in conversations for q in c.questions]
    rng = random.Random(seed)
    return [f"{rng.choice(turns)} {rng.choice(turns)}" for _ in range(n)], questions


def rss_mb(pid: int) -> float:
    """Resident memory of a process and all its descendants (the search process and its
    Edge worker), from /proc."""
    total = 0
    for proc in (pid, *_descendants(pid)):
        for line in Path(f"/proc/{proc}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                total += int(line.split()[1])
    return round(total / 1024, 1)


def _descendants(pid: int) -> list[int]:
    out: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        for child in (task / "children").read_text().split():
            out.extend((int(child), *_descendants(int(child))))
    return out


def cpu_seconds(pid: int) -> dict[str, float]:
    """CPU time (user + system) of the server and each of its descendants, by role: the
    server, its search process, the Edge worker (from /proc; a role absent is left out)."""
    tick = os.sysconf("SC_CLK_TCK")
    out: dict[str, float] = {}
    for proc in (pid, *_descendants(pid)):
        cmdline = Path(f"/proc/{proc}/cmdline").read_bytes()
        role = (
            "edge_worker"
            if b"vector_worker" in cmdline
            else "search_process"
            if b"index_process" in cmdline
            else "server"
        )
        fields = Path(f"/proc/{proc}/stat").read_text().rsplit(")", 1)[1].split()
        out[role] = out.get(role, 0.0) + (int(fields[11]) + int(fields[12])) / tick
    return out


def client_cpu_seconds() -> float:
    """CPU time of this process (the bench's client), all threads."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def cpu_ms_per_call(
    before: dict[str, float], after: dict[str, float], client: float, calls: int
) -> dict[str, float]:
    """Each process's CPU milliseconds per call over a sustained phase, and their total."""
    out = {role: (after[role] - before.get(role, 0.0)) * 1000 / max(1, calls) for role in after}
    out["client"] = client * 1000 / max(1, calls)
    out["total"] = sum(out.values())
    return {role: round(ms, 3) for role, ms in out.items()}


def du_mb(path: Path) -> float:
    """Bytes under `path`, in MB."""
    return round(sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) / 1e6, 1)


def lag_records(metrics_port: int) -> int:
    """The lexical and vector lanes' lag, the larger, from /metrics."""
    body = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5).read()
    found = re.findall(rb'cairn_index_lag_records\{projection="\w+"\} ([0-9.e+]+)', body)
    return int(max((float(x) for x in found), default=0.0))


def unoptimized_points(metrics_port: int) -> int:
    """Vector points written since the last graph build, from /metrics."""
    body = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5).read()
    found = re.search(rb"^cairn_vector_points_unoptimized ([0-9.e+]+)$", body, re.MULTILINE)
    return int(float(found.group(1))) if found else 0


def load_log(client: cairn.Client, records: list[str], streams: int) -> tuple[list[str], float]:
    """Creates the streams and writes the records by WriteBatch; returns ids and seconds."""
    ids = []
    for _ in range(streams):
        stream = client.recall.create_stream(StreamKind.CONVERSATION).stream.id
        for author in AUTHORS:
            client.recall.attach(stream, author, ParticipantRole.WRITER)
        ids.append(stream)
    per_stream: dict[str, list[WriteEntry]] = {s: [] for s in ids}
    for i, text in enumerate(records):
        tags = ("tagged",) if i % 10 == 0 else ()
        per_stream[ids[i % streams]].append(WriteEntry(text, AUTHORS[i % 3], tags))
    started = time.perf_counter()
    for stream, entries in per_stream.items():
        for start in range(0, len(entries), 1000):
            client.recall.write_batch(stream, entries[start : start + 1000])
    return ids, time.perf_counter() - started


def sizes(client: cairn.Client, ids: list[str]) -> dict[str, int]:
    """Each stream's size now."""
    return {s: client.recall.get_stream(s).size for s in ids}


def wait_indexed(client: cairn.Client, ids: list[str], timeout: float) -> float:
    """Seconds until a search with every stream's size as min_seq answers."""
    wanted = sizes(client, ids)
    started = time.perf_counter()
    while True:
        try:
            for start in range(0, len(ids), 100):
                chunk = ids[start : start + 100]
                client.recall.search(
                    "x", stream_ids=chunk, min_seq={s: wanted[s] for s in chunk}, top_k=1
                )
            return time.perf_counter() - started
        except (cairn.Unavailable, cairn.DeadlineExceeded):
            # Still indexing, or frozen by a search-graph build: ask again.
            if time.perf_counter() - started > timeout:
                raise


def wait_for_log(server: ServerProcess, text: str, timeout: float) -> float:
    """Seconds until `text` appears in the server's log (0 when it does not in time)."""
    started = time.perf_counter()
    while time.perf_counter() - started < timeout:
        if text in server.log():
            return time.perf_counter() - started
        time.sleep(1)
    return 0.0


async def sustained_calls(
    address: str,
    key: str,
    ids: list[str],
    seconds: float,
    write: bool,
    metrics_port: int,
    server_pid: int,
    in_flight: int = 32,
) -> dict[str, Any]:
    """`in_flight` unary calls in flight for `seconds`, spread over the streams: `Write` (the lag
    sampled meanwhile), or `GetStream` (one row read: the baseline of the same client and
    concurrency). Each process's CPU per call is measured over the same span: the server's,
    its search process's, the Edge worker's and this client's."""
    texts_ = [f"sustained write {i} about the weather and the garden" for i in range(1000)]
    count = 0
    lags: list[int] = []
    async with AsyncClient(recall=address, api_key=key) as client:
        loop = asyncio.get_running_loop()
        stop = loop.time() + seconds

        async def caller(w: int) -> None:
            nonlocal count
            i = w
            while loop.time() < stop:
                stream = ids[i % len(ids)]
                if write:
                    await client.recall.write(stream, texts_[i % 1000], source_agent_id="ana")
                else:
                    await client.recall.get_stream(stream)
                count += 1
                i += in_flight

        async def sampler() -> None:
            while write and loop.time() < stop:
                await asyncio.sleep(0.5)
                lags.append(await asyncio.to_thread(lag_records, metrics_port))

        started = loop.time()
        cpu_before, client_before = cpu_seconds(server_pid), client_cpu_seconds()
        await asyncio.gather(*(caller(w) for w in range(in_flight)), sampler())
        elapsed = loop.time() - started
        cpu_after, client_after = cpu_seconds(server_pid), client_cpu_seconds()
    cpu = cpu_ms_per_call(cpu_before, cpu_after, client_after - client_before, count)
    if not write:
        return {"calls": count, "calls_per_s": round(count / elapsed), "cpu_ms_per_call": cpu}
    return {
        "writes": count,
        "writes_per_s": round(count / elapsed),
        "lag_records_max": max(lags, default=0),
        "lag_records_p50": int(percentile([float(x) for x in lags], 50)) if lags else 0,
        "cpu_ms_per_call": cpu,
    }


def search_latency(
    client: cairn.Client, ids: list[str], questions: list[str], n: int, seed: int
) -> dict[str, Any]:
    """Client-side p50/p95 (ms) per scope and mode."""
    rng = random.Random(seed)
    out: dict[str, Any] = {}
    for scope, width in (("one_stream", 1), ("ten_streams", 10), ("all_streams", 100)):
        for mode in ("hybrid", "lexical", "vector"):
            samples = []
            for _ in range(n):
                streams = ids[:100] if width == 100 else rng.sample(ids, width)
                question = rng.choice(questions)
                t0 = time.perf_counter()
                client.recall.search(question, stream_ids=streams, mode=mode, top_k=10)
                samples.append((time.perf_counter() - t0) * 1000)
            out[f"{scope}/{mode}"] = {
                "p50": round(percentile(samples, 50), 2),
                "p95": round(percentile(samples, 95), 2),
            }
    return out


def optimizes(log_text: str) -> list[dict[str, float]]:
    """The vector index builds the server logged: points and seconds each."""
    out = []
    for line in log_text.splitlines():
        if '"msg": "vector index optimized"' in line:
            entry = json.loads(line)
            out.append({"points": entry["points"], "seconds": entry["seconds"]})
    return out


def wait_for_optimize(
    server: ServerProcess,
    seen: int,
    timeout: float,
    client: cairn.Client | None = None,
    probe: tuple[list[str], list[str]] | None = None,
) -> dict[str, Any]:
    """Waits until the server has logged more than `seen` index builds (bounded). With a
    client and `probe` (stream ids, questions), searches meanwhile, one every 0.2 s: the
    server's answers during the build (round trips, and how many went without the vector
    lane); and every fifth time writes a record and searches for its words with its seq as
    `min_seq`: how long until a record written during the build is found."""
    started = time.perf_counter()
    rng = random.Random(5)
    samples: list[float] = []
    found: list[float] = []
    missed = 0
    skipped = 0
    while time.perf_counter() - started < timeout and len(optimizes(server.log())) <= seen:
        if client is None or probe is None:
            time.sleep(1)
            continue
        t0 = time.perf_counter()
        hits = client.recall.search(rng.choice(probe[1]), stream_ids=[rng.choice(probe[0])])
        samples.append((time.perf_counter() - t0) * 1000)
        skipped += hits.vector_lane_skipped
        if len(samples) % 5 == 0:
            stream = rng.choice(probe[0])
            text = f"written during the build, marker{len(samples)}"
            t0 = time.perf_counter()
            seq = client.recall.write(stream, text, source_agent_id=AUTHORS[0]).record.seq
            try:
                got = client.recall.search(
                    f"marker{len(samples)}", stream_ids=[stream], min_seq={stream: seq}
                )
            except cairn.Unavailable:
                missed += 1
            else:
                if [h.record.seq for h in got][:1] == [seq]:
                    found.append((time.perf_counter() - t0) * 1000)
                else:
                    missed += 1
        time.sleep(0.2)
    if not samples:
        return {}
    return {
        "searches": len(samples),
        "vector_lane_skipped": skipped,
        "ms_p50": round(percentile(samples, 50), 2),
        "ms_max": round(max(samples), 2),
        "records_written": len(found) + missed,
        "found_by_min_seq_search": len(found),
        "write_to_found_ms_p50": round(percentile(found, 50), 2) if found else None,
        "write_to_found_ms_max": round(max(found), 2) if found else None,
    }


def log_mb(data_dir: Path, postgres: str | None, schema: str) -> float:
    """The log's size: the SQLite files, or the schema's tables and indexes."""
    if not postgres:
        return round(sum(p.stat().st_size for p in data_dir.glob("recall.sqlite3*")) / 1e6, 1)
    with psycopg.connect(postgres) as conn:
        row = conn.execute(
            "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c"
            " JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE n.nspname = %s AND c.relkind = 'r'",
            (schema,),
        ).fetchone()
    return round(float(row[0] if row else 0) / 1e6, 1)


def run(args: argparse.Namespace) -> dict[str, Any]:
    """The whole benchmark; returns the figures."""
    records, questions = texts(Path(args.dataset), args.records)
    out: dict[str, Any] = {"records": args.records, "streams": args.streams}
    schema = f"scale_{uuid.uuid4().hex[:8]}"
    with tempfile.TemporaryDirectory(prefix="cairn-scale-") as tmp:
        data_dir = Path(tmp)
        metrics_port = free_port()
        flags = ["--metrics-port", str(metrics_port)]
        if args.index_inline:
            flags.append("--index-inline")
            out["index_inline"] = True
        flags += ["--event-loop", args.event_loop]
        out["event_loop"] = args.event_loop
        if args.in_flight != 32:
            out["in_flight"] = args.in_flight
        if args.write_access_log:
            out["write_access_log"] = True
        keys: Any
        if args.postgres:
            flags += ["--database-url", args.postgres, "--database-schema", schema]
            keys = PostgresKeyStore(args.postgres, schema)
        else:
            keys = SqliteKeyStore(data_dir)
        key, _ = create_key(keys, TENANT, Role.ADMIN, "bench")
        other_key, _ = create_key(keys, OTHER_TENANT, Role.ADMIN, "bench")
        keys.close()
        # The load and the writes run against the server as it is deployed (no access log,
        # unless --write-access-log); the searches against the same data directory served
        # again with the access log, which gives each call's server-side time.
        # The same port both times: on PostgreSQL the index directory is named after it.
        port = free_port()
        write_flags = [*flags, "--access-log"] if args.write_access_log else flags
        server = ServerProcess("recall_service", data_dir, port, write_flags, {}).start()
        assert server.proc is not None
        out["store"] = "postgres" if args.postgres else "sqlite"
        try:
            with cairn.Client(recall=server.address, api_key=key, timeout=600) as client:
                if args.other_tenant_records:
                    out["other_tenant_records"] = args.other_tenant_records
                    load_other_tenant(server, other_key, args)
                builds_before = len(optimizes(server.log()))
                ids, seconds = load_log(client, records, args.streams)
                out["load_writebatch_records_per_s"] = round(args.records / seconds)
                caught = wait_indexed(client, ids, timeout=7200)
                out["load_index_caught_up_s_after_writes"] = round(caught, 1)
                out["load_indexed_records_per_s"] = round(args.records / (seconds + caught))
                if args.records >= OPTIMIZE_AFTER:  # the server builds the graph once idle
                    out["hybrid_searches_during_graph_build"] = wait_for_optimize(
                        server, builds_before, 7200, client, (ids, questions)
                    )
                out["rss_mb_after_load"] = rss_mb(server.proc.pid)
                built = len(optimizes(server.log()))
                out["sustained_get_stream"] = baseline = asyncio.run(
                    sustained_calls(
                        server.address,
                        key,
                        ids,
                        args.write_seconds,
                        False,
                        metrics_port,
                        server.proc.pid,
                        args.in_flight,
                    )
                )
                sustained = asyncio.run(
                    sustained_calls(
                        server.address,
                        key,
                        ids,
                        args.write_seconds,
                        True,
                        metrics_port,
                        server.proc.pid,
                        args.in_flight,
                    )
                )
                sustained["catch_up_s"] = round(wait_indexed(client, ids, timeout=7200), 2)
                sustained["to_get_stream_ratio"] = round(
                    sustained["writes_per_s"] / max(1, baseline["calls_per_s"]), 3
                )
                out["sustained_unary_writes"] = sustained
                # The writes paused: let the index build they may trigger (it may already
                # have run during the catch-up) finish first.
                if unoptimized_points(metrics_port) >= OPTIMIZE_AFTER:
                    wait_for_optimize(server, built, timeout=3600)
        finally:
            server.stop(timeout=600)
        server = ServerProcess(
            "recall_service", data_dir, port, [*flags, "--access-log"], {}
        ).start()
        assert server.proc is not None
        try:
            with cairn.Client(recall=server.address, api_key=key, timeout=600) as client:
                wait_indexed(client, ids, timeout=600)
                # Two passes of different questions and streams: the first meets the
                # caches as the restart left them, the second is steady state.
                for name, seed in (("first_pass", 3), ("second_pass", 4)):
                    mark = len(server.log())
                    out[f"search_ms_client_{name}"] = search_latency(
                        client, ids, questions, args.queries, seed
                    )
                    server_ms = server_call_ms(server.log()[mark:])
                    out[f"search_ms_server_{name}"] = per_scope_server(server_ms, args.queries)
                mark = len(server.log())
                out["empty_rpc_ms_client"] = empty_rpc_latency(client, ids, args.queries)
                out["empty_rpc_ms_server"] = per_scope_server(
                    server_call_ms(server.log()[mark:], "GetStream"), args.queries, ["GetStream"]
                )["GetStream"]
                out["rss_mb"] = rss_mb(server.proc.pid)
        finally:
            server.stop(timeout=600)
        out["optimizes"] = optimizes(server.log())  # one log file: both ran on one port
        index_dir = next(data_dir.glob("index*"))
        out["disk_mb"] = {
            "log": log_mb(data_dir, args.postgres, schema),
            "lexical": du_mb(index_dir / "lexical"),
            "vectors": du_mb(index_dir / "vectors"),
        }
    if args.postgres:
        with psycopg.connect(args.postgres, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'.encode())
    return out


def load_other_tenant(server: ServerProcess, key: str, args: argparse.Namespace) -> None:
    """Another tenant's records in the same indexes (1,000 per stream), indexed — and when
    there are enough, built into the vector index's search graph — before the measured
    tenant's load begins."""
    n = args.other_tenant_records
    records, _ = texts(Path(args.dataset), n, seed=9)
    with cairn.Client(recall=server.address, api_key=key, timeout=600) as client:
        ids, _ = load_log(client, records, max(1, n // 1000))
        wait_indexed(client, ids, timeout=7200)
    if n >= OPTIMIZE_AFTER:
        wait_for_optimize(server, 0, timeout=3600)


def empty_rpc_latency(client: cairn.Client, ids: list[str], n: int) -> dict[str, float]:
    """The baseline taken in the same run: client-side p50/p95 (ms) of `GetStream`, a call
    that reads one row (the server's own share shows in its access log)."""
    samples = []
    for i in range(n):
        t0 = time.perf_counter()
        client.recall.get_stream(ids[i % len(ids)])
        samples.append((time.perf_counter() - t0) * 1000)
    return {"p50": round(percentile(samples, 50), 2), "p95": round(percentile(samples, 95), 2)}


def per_scope_server(
    server_ms: list[float], n: int, names: list[str] | None = None
) -> dict[str, Any]:
    """Server-side p50/p95 per scope and mode, in the order `search_latency` asked (or per
    name of `names`, n calls each)."""
    names = names or [
        f"{scope}/{mode}"
        for scope in ("one_stream", "ten_streams", "all_streams")
        for mode in ("hybrid", "lexical", "vector")
    ]
    out = {}
    for i, name in enumerate(names):
        chunk = server_ms[i * n : (i + 1) * n]
        if chunk:
            out[name] = {
                "p50": round(percentile(chunk, 50), 2),
                "p95": round(percentile(chunk, 95), 2),
            }
    return out


def main() -> None:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--dataset", default="../shared/data/locomo-dev.json")
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--streams", type=int, default=100)
    parser.add_argument("--write-seconds", type=float, default=20.0)
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--postgres", help="a PostgreSQL URL: the log there (a fresh schema)")
    parser.add_argument(
        "--index-inline",
        action="store_true",
        help="the server's indexer and searches in its own process (its --index-inline)",
    )
    parser.add_argument(
        "--event-loop",
        choices=event_loop.CHOICES,
        default="uvloop",
        help="the server's event loop (its --event-loop; default uvloop)",
    )
    parser.add_argument(
        "--in-flight",
        type=int,
        default=32,
        help="calls in flight during the sustained GetStream and Write phases (default 32)",
    )
    parser.add_argument(
        "--write-access-log",
        action="store_true",
        help="serve the load and the sustained writes with the access log on too (it is on "
        "for the searches either way)",
    )
    parser.add_argument(
        "--other-tenant-records",
        type=int,
        default=0,
        help="records a second tenant writes into the same indexes first (default 0)",
    )
    print(json.dumps(run(parser.parse_args())))


if __name__ == "__main__":
    main()
