"""Search lanes at scale: embedding, indexing and query latency at N records in one tenant.

    python -m bench.projections_bench [--records 100000] [--streams 100] [--batch 2048]
        [--queries 500] [--no-quantize] [--dataset ../shared/data/locomo-dev.json]

Builds a Qdrant Edge index and a Tantivy index (on disk, in a temporary directory) over N
records of one tenant spread over `--streams` streams, the way the indexer would: for each
batch of the log, build the texts (with the neighbours each record's context needs, and
re-indexing the records whose after-context the batch extends), embed them, upsert them with
the stream markers into Qdrant Edge, add them to Tantivy and commit. Texts are pairs of
LoCoMo turns (so vocabulary and lengths are conversational); queries are LoCoMo questions.
Reports ingest rates, then per-query latency (p50/p95, ms) of each lane and of a whole hybrid
search (embed the query, both lanes, fusion), filtered to one stream and to ten streams.
Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from bench.load import percentile
from bench.locomo_data import load, turn_content
from recall_service.projections.documents import IndexedRecord, IndexedText, TextSettings
from recall_service.projections.embedders import Vectors, WordLlamaEmbedder
from recall_service.projections.filters import SearchFilter
from recall_service.projections.fusion import convex
from recall_service.projections.indexing import apply_batch
from recall_service.projections.lexical import LexicalIndex
from recall_service.projections.vectors import QdrantEdgeIndex

TENANT = "bench"
DEPTH = 50
SPENT: dict[str, float] = {"embed": 0.0, "vector_upsert": 0.0, "lexical": 0.0}


class TimedEmbedder(WordLlamaEmbedder):
    """The default embedder, adding the time it spends to SPENT."""

    def token_sums(self, texts: Sequence[str]) -> Vectors:
        """As the parent, timed."""
        start = time.perf_counter()
        try:
            return super().token_sums(texts)
        finally:
            SPENT["embed"] += time.perf_counter() - start


class TimedEdge(QdrantEdgeIndex):
    """Qdrant Edge, adding the time upserts take to SPENT."""

    def upsert(
        self, records: Sequence[IndexedRecord], vectors: Vectors, marks: Mapping[str, int]
    ) -> None:
        """As the parent, timed."""
        start = time.perf_counter()
        try:
            super().upsert(records, vectors, marks)
        finally:
            SPENT["vector_upsert"] += time.perf_counter() - start


class TimedLexical(LexicalIndex):
    """Tantivy, adding the time applying a batch (add + commit) takes to SPENT."""

    def apply(
        self,
        records: Sequence[IndexedRecord],
        texts: Sequence[IndexedText],
        marks: Mapping[str, int],
    ) -> None:
        """As the parent, timed."""
        start = time.perf_counter()
        try:
            super().apply(records, texts, marks)
        finally:
            SPENT["lexical"] += time.perf_counter() - start


def corpus(
    dataset: Path, n: int, streams: int, seed: int = 7
) -> tuple[list[IndexedRecord], list[str]]:
    """N records over `streams` streams (seqs 1.. in each), and the question texts."""
    conversations, _ = load(dataset)
    turns = [t for c in conversations for t in c.turns]
    questions = [q.question for c in conversations for q in c.questions]
    rng = random.Random(seed)
    records = []
    for i in range(n):
        a, b = rng.choice(turns), rng.choice(turns)
        stream = i % streams
        records.append(
            IndexedRecord(
                tenant=TENANT,
                stream_id=f"stream-{stream}",
                seq=i // streams + 1,
                author=a.speaker,
                created_at=1_700_000_000.0 + i,
                text=f"{turn_content(a)} {turn_content(b)}",
                tags=("tagged",) if i % 10 == 0 else (),
            )
        )
    return records, questions


def timed_ms(call: Callable[[], object], repeats: int) -> dict[str, float]:
    """p50/p95 of `repeats` calls, in milliseconds."""
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        samples.append((time.perf_counter() - start) * 1000)
    return {"p50": round(percentile(samples, 50), 3), "p95": round(percentile(samples, 95), 3)}


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Build both indexes and measure; returns the JSON-ready figures."""
    records, questions = corpus(Path(args.dataset), args.records, args.streams)
    settings = TextSettings()
    embedder = TimedEmbedder()
    out: dict[str, Any] = {
        "records": args.records,
        "streams": args.streams,
        "batch": args.batch,
        "quantize": not args.no_quantize,
    }
    with tempfile.TemporaryDirectory() as tmp:
        vectors = TimedEdge(Path(tmp) / "edge", embedder.dim, quantize=not args.no_quantize)
        lexical = TimedLexical(Path(tmp) / "tantivy")
        recent: dict[str, list[IndexedRecord]] = {}  # the tail of each stream, for context
        keep = settings.neighbours_before + settings.neighbours_after
        reindexed = 0
        started = time.perf_counter()
        for start in range(0, len(records), args.batch):
            batch = records[start : start + args.batch]
            # What the indexer does: read the tail each stream's context needs, then index
            # the new records plus those whose after-context they extend.
            first: dict[str, int] = {}
            for r in batch:
                first.setdefault(r.stream_id, r.seq)
            window = [r for stream in first for r in recent.get(stream, [])] + batch
            reindexed += apply_batch(window, first, lexical, vectors, embedder, settings)
            for r in batch:
                tail = recent.setdefault(r.stream_id, [])
                tail.append(r)
                del tail[:-keep]
        total = time.perf_counter() - started
        n = len(records)
        out["ingest"] = {
            "records_per_s": round(n / total),
            "indexed_per_record": round(reindexed / n, 2),
            "embed_records_per_s": round(reindexed / SPENT["embed"]),
            "vector_upserts_per_s": round(reindexed / SPENT["vector_upsert"]),
            "lexical_docs_per_s": round(reindexed / SPENT["lexical"]),
            "seconds": {"total": round(total, 1), **{k: round(v, 1) for k, v in SPENT.items()}},
        }
        t0 = time.perf_counter()
        vectors.optimize()
        out["vector_optimize_s"] = round(time.perf_counter() - t0, 1)

        rng = random.Random(3)
        picks = [rng.choice(questions) for _ in range(args.queries)]
        qvecs = embedder.embed(picks)
        one = [SearchFilter(TENANT, (f"stream-{rng.randrange(args.streams)}",)) for _ in picks]
        ten = [
            SearchFilter(TENANT, tuple(f"stream-{s}" for s in rng.sample(range(args.streams), 10)))
            for _ in picks
        ]
        tenant_wide = [
            SearchFilter(TENANT, tuple(f"stream-{s}" for s in range(args.streams))) for _ in picks
        ]

        def cycle(fn: Callable[[int], object]) -> Callable[[], object]:
            state = {"i": 0}

            def call() -> object:
                i = state["i"] = (state["i"] + 1) % len(picks)
                return fn(i)

            return call

        r = args.queries
        latency: dict[str, Any] = {}
        for name, filters in (
            ("one_stream", one),
            ("ten_streams", ten),
            ("all_streams", tenant_wide),
        ):

            def embed_query(i: int) -> object:
                return embedder.embed([picks[i]])

            def lexical_lane(i: int, f: list[SearchFilter] = filters) -> object:
                return lexical.search(picks[i], DEPTH, f[i])

            def vector_lane(i: int, f: list[SearchFilter] = filters) -> object:
                return vectors.search(qvecs[i], DEPTH, f[i])

            def hybrid(i: int, f: list[SearchFilter] = filters) -> object:
                return convex(
                    lexical.search(picks[i], DEPTH, f[i]),
                    vectors.search(embedder.embed([picks[i]])[0], DEPTH, f[i]),
                    limit=10,
                )

            latency[name] = {
                "embed_query": timed_ms(cycle(embed_query), r),
                "lexical": timed_ms(cycle(lexical_lane), r),
                "vector": timed_ms(cycle(vector_lane), r),
                "hybrid": timed_ms(cycle(hybrid), r),
            }
        out["query_ms"] = latency
        vectors.close()
        lexical.close()
        out["disk_mb"] = {
            name: round(
                sum(p.stat().st_size for p in (Path(tmp) / name).rglob("*") if p.is_file()) / 1e6, 1
            )
            for name in ("edge", "tantivy")
        }
    return out


def main() -> None:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--dataset", default="../shared/data/locomo-dev.json")
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--streams", type=int, default=100)
    parser.add_argument("--batch", type=int, default=2048)
    parser.add_argument("--queries", type=int, default=500)
    parser.add_argument(
        "--no-quantize",
        action="store_true",
        help="no int8 copy of the vectors (the default keeps one)",
    )
    print(json.dumps(run(parser.parse_args())))


if __name__ == "__main__":
    main()
