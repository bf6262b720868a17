"""Two recall replicas on one PostgreSQL log, each with its own Tantivy and Qdrant Edge
indexes (no Qdrant server here), each tailing the shared log: a write through one is found
through the other, at once with `min_seq`, and by itself once the other replica's poll has
seen it; a redaction through one disappears through the other."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

import cairn
from cairn.enums import ParticipantRole, StreamKind
from cairn_server.auth import Role
from tests.servers import ServerProcess, free_port, make_key


@pytest.fixture(scope="module")
def replicas(
    tmp_path_factory: pytest.TempPathFactory, postgres_url: str
) -> Iterator[list[cairn.Client]]:
    schema = f"s_{uuid.uuid4().hex[:12]}"
    flags = ["--database-url", postgres_url, "--database-schema", schema]
    # One data directory, as a fleet mounts one signing key; each replica's index directory
    # is index-<port> inside it.
    data_dir: Path = tmp_path_factory.mktemp("search-fleet")
    servers = [
        ServerProcess("recall_service", data_dir, free_port(), flags, {}).start() for _ in range(2)
    ]
    key = make_key(servers[0], "acme", Role.ADMIN)
    clients = [cairn.Client(recall=s.address, api_key=key) for s in servers]
    yield clients
    for client in clients:
        client.close()
    for server in servers:
        server.kill()
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'.encode())


def test_a_write_through_one_replica_is_found_through_the_other(
    replicas: list[cairn.Client],
) -> None:
    a, b = replicas
    room = a.recall.create_stream(StreamKind.CONVERSATION).stream.id
    a.recall.attach(room, "ana", ParticipantRole.WRITER)
    seq = a.recall.write(room, "The heron nests by the old mill.", source_agent_id="ana")
    hits = b.recall.search("heron", stream_ids=[room], min_seq={room: seq.record.seq})
    assert [(h.record.seq, h.record.content) for h in hits] == [
        (seq.record.seq, "The heron nests by the old mill.")
    ]
    # Written through b, found through a without min_seq once a's poll has seen it.
    later = b.recall.write(room, "An otter swam past the mill at dusk.", source_agent_id="ana")
    deadline = time.monotonic() + 10
    found: list[int] = []
    while time.monotonic() < deadline:
        found = [h.record.seq for h in a.recall.search("otter", stream_ids=[room], mode="lexical")]
        if found:
            break
        time.sleep(0.05)
    assert found[0] == later.record.seq


def test_a_redaction_through_one_replica_disappears_through_the_other(
    replicas: list[cairn.Client],
) -> None:
    a, b = replicas
    room = a.recall.create_stream(StreamKind.CONVERSATION).stream.id
    a.recall.attach(room, "ana", ParticipantRole.WRITER)
    a.recall.write(room, "Lunch at noon.", source_agent_id="ana")
    secret = a.recall.write(room, "The safe combination is 4-8-15.", source_agent_id="ana")
    a.recall.write(room, "See you then.", source_agent_id="ana")
    hits = b.recall.search("safe combination", stream_ids=[room], min_seq={room: 4}, top_k=1)
    assert [h.record.seq for h in hits] == [secret.record.seq]
    redaction = a.recall.redact(room, secret.record.seq).record.seq
    for mode in ("lexical", "vector", "hybrid"):
        after = b.recall.search(
            "safe combination", stream_ids=[room], mode=mode, min_seq={room: redaction}
        )
        assert secret.record.seq not in [h.record.seq for h in after]
    assert b.recall.search("combination", stream_ids=[room], mode="lexical") == []
