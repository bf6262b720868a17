"""`cairn recall reindex` on a stopped server's data directory (and on PostgreSQL): the
rebuilt indexes answer as before; a running server's index is refused, with the reason."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

import cairn
from cairn.enums import ParticipantRole, StreamKind
from cairn_server.auth import Role
from tests.servers import ServerProcess, free_port, make_key

TOPICS = ["orchard", "glacier", "violin", "harbour", "lantern"]


def reindex(server: ServerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    """`cairn recall reindex` against the server's log and index directory."""
    store: list[str] = []
    if "--database-url" in server.args:  # the replica's log, and its index-<port> directory
        at = server.args.index("--database-url")
        store = [*server.args[at : at + 4], "--port", str(server.port)]
    return subprocess.run(
        [
            sys.executable,
            "-c",
            "from cairn_server.cli import main; main()",
            "recall",
            "reindex",
            "--data-dir",
            str(server.data_dir),
            *store,
            *args,
        ],
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
    )


def answers(client: cairn.Client, rooms: list[str], sizes: dict[str, int]) -> list[Any]:
    """Per search: the vector lane's ranking; for the others the best hit and every record
    found (BM25 statistics count replaced documents until Tantivy merges segments, so a
    rebuilt index scores a little differently: test_search_indexer)."""
    out: list[Any] = []
    for mode in ("hybrid", "lexical", "vector"):
        for text in ("orchard", "violin by the harbour", "note 7"):
            hits = client.recall.search(text, stream_ids=rooms, mode=mode, min_seq=sizes, top_k=100)
            found = [(h.record.stream_id, h.record.seq) for h in hits]
            out.append(found if mode == "vector" else (found[0], set(found)))
    return out


def test_reindex_rebuilds_what_the_server_serves(
    tmp_path_factory: pytest.TempPathFactory, recall_backend: list[str]
) -> None:
    data_dir = tmp_path_factory.mktemp("reindex")
    server = ServerProcess("recall_service", data_dir, free_port(), recall_backend, {}).start()
    key = make_key(server, "acme", Role.ADMIN)
    rooms: list[str] = []
    sizes: dict[str, int] = {}
    with cairn.Client(recall=server.address, api_key=key) as client:
        for r in range(2):
            room = client.recall.create_stream(StreamKind.CONVERSATION).stream.id
            client.recall.attach(room, "ana", ParticipantRole.WRITER)
            for i in range(15):
                text = f"note {i} about the {TOPICS[(i + r) % 5]} and the {TOPICS[(2 * i) % 5]}"
                sizes[room] = client.recall.write(room, text, source_agent_id="ana").record.seq
            rooms.append(room)
        client.recall.redact(rooms[0], 5)
        sizes[rooms[0]] += 1
        before = answers(client, rooms, sizes)

    running = reindex(server)
    assert running.returncode == 2
    assert "is in use by another recall process (stop it first" in running.stderr

    server.stop()
    done = reindex(server, "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert (report["streams"], report["records"]) == (2, sum(sizes.values()))
    assert report["embedder"] == "wordllama-l2_supercat-256"
    one = reindex(server, "--stream", rooms[1], "--tenant", "acme", "--json")
    assert one.returncode == 0, one.stderr
    assert json.loads(one.stdout.strip().splitlines()[-1])["records"] == sizes[rooms[1]]
    missing = reindex(server, "--stream", "no-such-stream")
    assert (missing.returncode, missing.stderr.strip()) == (
        2,
        "cairn: stream 'no-such-stream' not found",
    )

    server.start()
    try:
        with cairn.Client(recall=server.address, api_key=key) as client:
            assert answers(client, rooms, sizes) == before
    finally:
        server.kill()
