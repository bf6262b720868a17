"""LoCoMo evaluation of the recall service's `Search`, through the real gRPC API.

    python -m bench.locomo --dataset ../shared/data/locomo-dev.json [--mode hybrid|lexical|vector]
        [--json] [--top-k 20]

Starts a recall server on a free port with a fresh data directory, writes each
conversation's turns into a stream of its own with unary `Write` calls (one writer thread per
conversation), asks every question through `Search` over its conversation's stream, and
reports turn-level evidence Recall@1/5/10/20, Hit@10 and MRR for categories 1-4 and for
category 5, the evidence ids dropped (malformed, or naming no turn), write throughput,
indexing lag and search latency.

How a turn becomes a write is the general mapping any client would use, nothing
LoCoMo-specific in the service: the speaker is the author (`source_agent_id`, attached as a
WRITER), the content is the turn's text with a shared image's caption appended
(`text [shares an image: caption]`), the session's time (plus the turn's index in seconds) is
when it was said (`occurred_at`: history written after the fact; the log keeps its own
server time beside it), and the turn's id and session go in the metadata. No tags.

- `writes_per_s`: turns written over the wall time of all writers.
- `index_lag_s`: from the last write's acknowledgement until a `Search` with every stream's
  last seq as `min_seq` answers (the indexes hold everything), including that one search.
- `search_ms`: client-side round trips of the questions' searches (p50, p95); the server-side
  time of the same calls (the access log's `ms`) is reported beside it as `server_search_ms`.

With `--json` the last line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import cairn
from bench.load import percentile
from bench.locomo_data import Conversation, Outcome, by_category_group, load, turn_content
from cairn.enums import ParticipantRole, StreamKind
from cairn_server.auth import Role, create_key
from cairn_server.keys_sqlite import SqliteKeyStore
from cairn_server.process import ServerProcess, free_port

TENANT = "locomo"


def stream_id_of(conversation: Conversation) -> str:
    """The stream a conversation is written to."""
    return f"locomo-{conversation.sample_id}"


def write_conversation(client: cairn.Client, conversation: Conversation) -> int:
    """Creates the conversation's stream, attaches its speakers, writes its turns in order
    (one unary Write each); returns the last seq written."""
    stream_id = stream_id_of(conversation)
    client.recall.create_stream(StreamKind.CONVERSATION, stream_id=stream_id)
    for speaker in dict.fromkeys(t.speaker for t in conversation.turns):
        client.recall.attach(stream_id, speaker, ParticipantRole.WRITER)
    last = 0
    for turn in conversation.turns:
        written = client.recall.write(
            stream_id,
            turn_content(turn),
            source_agent_id=turn.speaker,
            metadata={"dia_id": turn.dia_id, "session": turn.session},
            idempotency_key=f"turn-{turn.dia_id}",
            occurred_at=datetime.fromtimestamp(turn.created_at, UTC),
        )
        last = written.record.seq
    return last


def server_call_ms(log_text: str, method: str = "Search") -> list[float]:
    """Server-side times of the calls of `method` (Search unless told), from the server's
    access log."""
    out = []
    for line in log_text.splitlines():
        if f'"method": "{method}"' not in line:
            continue
        entry = json.loads(line)
        if entry.get("msg") == "rpc" and entry.get("code") == "OK":
            out.append(float(entry["ms"]))
    return out


def run(dataset: Path, mode: str, top_k: int) -> dict[str, Any]:
    """Writes, waits for the indexes, asks; returns the report."""
    conversations, dropped = load(dataset)
    with tempfile.TemporaryDirectory(prefix="cairn-locomo-") as tmp:
        data_dir = Path(tmp)
        keys = SqliteKeyStore(data_dir)
        key, _ = create_key(keys, TENANT, Role.ADMIN, "locomo")
        keys.close()
        server = ServerProcess(
            "recall_service", data_dir, free_port(), ["--access-log"], {}
        ).start()
        try:
            with cairn.Client(recall=server.address, api_key=key, timeout=60) as client:
                report = _evaluate(client, conversations, mode, top_k)
        finally:
            server.stop()
        server_ms = server_call_ms(server.log())[1:]  # the first is the min_seq wait
    report["dropped_evidence_ids"] = len(dropped)
    report["dropped"] = [f"{d.sample_id}:{d.evidence_id} ({d.reason})" for d in dropped]
    if server_ms:
        report["server_search_ms"] = {
            "p50": round(percentile(server_ms, 50), 3),
            "p95": round(percentile(server_ms, 95), 3),
        }
    return report


def _evaluate(
    client: cairn.Client, conversations: list[Conversation], mode: str, top_k: int
) -> dict[str, Any]:
    last_seqs: dict[str, int] = {}
    errors: list[BaseException] = []

    def writer(conversation: Conversation) -> None:
        try:
            last_seqs[stream_id_of(conversation)] = write_conversation(client, conversation)
        except BaseException as error:  # re-raised below
            errors.append(error)

    started = time.perf_counter()
    threads = [threading.Thread(target=writer, args=(c,)) for c in conversations]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    written = time.perf_counter()
    turns = sum(len(c.turns) for c in conversations)
    client.recall.search("lag", stream_ids=list(last_seqs), min_seq=last_seqs, top_k=1)
    caught_up = time.perf_counter()

    outcomes: list[Outcome] = []
    latencies: list[float] = []
    for conversation in conversations:
        for question in conversation.questions:
            t0 = time.perf_counter()
            hits = client.recall.search(
                question.question,
                stream_ids=[stream_id_of(conversation)],
                mode=mode,
                top_k=top_k,
            )
            latencies.append((time.perf_counter() - t0) * 1000)
            ranked = tuple(str(h.record.metadata.get("dia_id", "")) for h in hits)
            outcomes.append(Outcome(question.category, question.evidence, ranked))
    report: dict[str, Any] = {"mode": mode, **by_category_group(outcomes)}
    report["writes_per_s"] = round(turns / (written - started), 1)
    report["index_lag_s"] = round(caught_up - written, 3)
    report["search_ms"] = {
        "p50": round(percentile(latencies, 50), 3),
        "p95": round(percentile(latencies, 95), 3),
    }
    report["turns"] = turns
    return report


def human(report: dict[str, Any]) -> str:
    """The report as a few lines for a person."""
    lines = [f"mode {report['mode']}"]
    for group in ("categories_1_4", "category_5"):
        g = report[group]
        lines.append(
            f"{group}: R@1 {g['recall@1']:.3f}  R@5 {g['recall@5']:.3f}  "
            f"R@10 {g['recall@10']:.3f}  R@20 {g['recall@20']:.3f}  Hit@10 {g['hit@10']:.3f}  "
            f"MRR {g['mrr']:.3f}  ({g['questions']} questions)"
        )
    lines.append(
        f"dropped evidence ids: {report['dropped_evidence_ids']} ({', '.join(report['dropped'])})"
    )
    lines.append(
        f"writes {report['writes_per_s']}/s over {report['turns']} turns; index lag "
        f"{report['index_lag_s']} s; search p50 {report['search_ms']['p50']} ms, p95 "
        f"{report['search_ms']['p95']} ms (client)"
    )
    return "\n".join(lines)


def main() -> None:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--dataset", required=True, type=Path, help="LoCoMo-format JSON")
    parser.add_argument("--mode", choices=["hybrid", "lexical", "vector"], default="hybrid")
    parser.add_argument("--top-k", type=int, default=20, help="hits asked per question (20)")
    parser.add_argument("--json", action="store_true", help="end with one JSON object")
    args = parser.parse_args()
    report = run(args.dataset, args.mode, args.top_k)
    print(human(report))
    if args.json:
        print(json.dumps(report, sort_keys=True))


if __name__ == "__main__":
    main()
