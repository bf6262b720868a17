"""`Search` over real gRPC, on both log stores: own writes through `min_seq`, each mode's
lane ranks, filters applied by both lanes, redaction, conflicts, and exact refusals."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import grpc
import pytest

import cairn
from cairn.enums import ParticipantRole, StreamKind
from cairn.recall_types import RecordRef, SearchMode
from cairn.v1 import recall_pb2 as pb
from cairn_server.auth import Role
from tests.clients import recall_client, rpc_error
from tests.servers import ServerProcess, free_port, make_key

IA = grpc.StatusCode.INVALID_ARGUMENT


@dataclass
class Env:
    client: cairn.Client
    raw: Any
    server: ServerProcess

    def stream(self, *writers: str) -> str:
        created = self.client.recall.create_stream(StreamKind.CONVERSATION)
        for agent in writers:
            self.client.recall.attach(created.stream.id, agent, ParticipantRole.WRITER)
        return created.stream.id

    def write(self, stream_id: str, author: str, content: str, *tags: str) -> int:
        written = self.client.recall.write(stream_id, content, source_agent_id=author, tags=tags)
        return written.record.seq


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory, recall_backend: list[str]) -> Iterator[Env]:
    data_dir = tmp_path_factory.mktemp("search")
    server = ServerProcess("recall_service", data_dir, free_port(), recall_backend, {}).start()
    key = make_key(server, "acme", Role.ADMIN)
    with (
        cairn.Client(recall=server.address, api_key=key) as client,
        grpc.insecure_channel(server.address) as channel,
    ):
        yield Env(client, recall_client(channel, key), server)
    server.kill()


def seqs(hits: list[cairn.recall_types.SearchHit]) -> list[int]:
    return [h.record.seq for h in hits]


def test_a_writer_sees_its_own_write_at_once_with_min_seq(env: Env) -> None:
    room = env.stream("ana", "bo")
    env.write(room, "ana", "The quarterly budget review moved to Thursday.")
    seq = env.write(room, "bo", "I adopted a grey kitten called Miso.")
    hits = env.client.recall.search("kitten Miso", stream_ids=[room], min_seq={room: seq})
    assert hits[0].record.seq == seq
    assert hits[0].record.content == "I adopted a grey kitten called Miso."
    # Both lanes found it; the lexical lane (weight 0.8) ranked it first.
    assert hits[0].lexical_rank == 1
    assert hits[0].vector_rank is not None
    assert hits[0].score == max(h.score for h in hits)


def test_each_mode_reports_only_its_own_lanes_ranks(env: Env) -> None:
    room = env.stream("ana")
    first = env.write(room, "ana", "Sailing on the lake at dawn.")
    last = env.write(room, "ana", "The lake froze over in January.")
    wait = {room: last}
    lexical = env.client.recall.search("lake", stream_ids=[room], mode="lexical", min_seq=wait)
    assert sorted(seqs(lexical)) == [first, last]
    assert [(h.lexical_rank, h.vector_rank) for h in lexical] == [(1, None), (2, None)]
    vector = env.client.recall.search("lake", stream_ids=[room], mode=SearchMode.VECTOR)
    assert sorted(seqs(vector)) == [first, last]
    assert [(h.lexical_rank, h.vector_rank) for h in vector] == [(None, 1), (None, 2)]
    assert -1.0 <= vector[1].score <= vector[0].score <= 1.0


def test_filters_hold_in_every_lane(env: Env) -> None:
    room = env.stream("ana", "bo")
    a1 = env.write(room, "ana", "Notes about the garden.", "home")
    b1 = env.write(room, "bo", "Notes about the garage.", "home", "car")
    a2 = env.write(room, "ana", "Notes about the car.", "car")
    records = list(env.client.recall.read(room))
    middle = records[1].created_at
    cases: list[tuple[dict[str, Any], list[int]]] = [
        ({}, [a1, b1, a2]),
        ({"source_agent_ids": ["bo"]}, [b1]),
        ({"tags_any": ["car"]}, [b1, a2]),
        ({"tags_all": ["home", "car"]}, [b1]),
        ({"tags_any": ["home"], "source_agent_ids": ["ana"]}, [a1]),
        ({"start": middle}, [b1, a2]),
        ({"end": middle}, [a1]),
        ({"start": middle, "end": middle + timedelta(microseconds=1)}, [b1]),
        ({"tags_any": ["nothing-has-this"]}, []),
    ]
    for mode in ("lexical", "vector", "hybrid"):
        for filters, expected in cases:
            hits = env.client.recall.search(
                "notes", stream_ids=[room], mode=mode, min_seq={room: a2}, top_k=50, **filters
            )
            assert sorted(seqs(hits)) == expected, (mode, filters)


def test_history_written_after_the_fact_is_searched_by_when_it_was_said(env: Env) -> None:
    """A record's `occurred_at` is its time in the indexes: the time filter of every lane
    finds it by when it was said, not by when it was written; one without it by the server's
    time."""
    room = env.stream("ana")
    said = datetime(2023, 5, 8, 13, 56, tzinfo=UTC)
    old = env.client.recall.write(
        room, "Notes from the lake trip.", source_agent_id="ana", occurred_at=said
    ).record
    new = env.client.recall.write(room, "Notes from today.", source_agent_id="ana").record
    assert (old.occurred_at, new.occurred_at) == (said, None)
    may = {"start": datetime(2023, 5, 1, tzinfo=UTC), "end": datetime(2023, 6, 1, tzinfo=UTC)}
    cases: list[tuple[dict[str, Any], list[int]]] = [
        ({}, [old.seq, new.seq]),
        (may, [old.seq]),
        ({"start": old.created_at}, [new.seq]),
        ({"end": datetime(2023, 5, 8, 13, 56, tzinfo=UTC)}, []),
    ]
    for mode in ("lexical", "vector", "hybrid"):
        for filters, expected in cases:
            hits = env.client.recall.search(
                "notes", stream_ids=[room], mode=mode, min_seq={room: new.seq}, **filters
            )
            assert sorted(seqs(hits)) == expected, (mode, filters)


def test_a_redacted_record_disappears_from_every_mode_and_from_its_neighbours(env: Env) -> None:
    room = env.stream("ana")
    env.write(room, "ana", "We met at the harbour.")
    secret = env.write(room, "ana", "The vault code is zanzibar.")
    last = env.write(room, "ana", "Then we had lunch.")
    for mode in ("lexical", "hybrid"):
        found = env.client.recall.search(
            "zanzibar", stream_ids=[room], mode=mode, top_k=1, min_seq={room: last}
        )
        assert seqs(found) == [secret]
    redaction = env.client.recall.redact(room, secret).record.seq
    for mode in ("lexical", "vector", "hybrid"):
        hits = env.client.recall.search(
            "vault code zanzibar", stream_ids=[room], mode=mode, min_seq={room: redaction}
        )
        assert secret not in seqs(hits)
        assert all("zanzibar" not in h.record.content for h in hits)
    # The neighbours were indexed again without it: nothing matches its words any more.
    lexical = env.client.recall.search("zanzibar", stream_ids=[room], mode="lexical")
    assert lexical == []


def test_different_authors_disagreeing_are_marked_and_one_authors_update_is_not(env: Env) -> None:
    room = env.stream("ana", "bo")
    ana = env.write(room, "ana", "The release ships on Friday after the final review.")
    bo = env.write(room, "bo", "The release ships on Monday after the final review meeting.")
    ana2 = env.write(room, "ana", "Correction: the release ships on Tuesday after review.")
    hits = env.client.recall.search(
        "when does the release ship", stream_ids=[room], min_seq={room: ana2}
    )
    by_seq = {h.record.seq: h.conflicts_with for h in hits}
    assert by_seq[bo] == (RecordRef(room, ana), RecordRef(room, ana2))
    assert by_seq[ana] == (RecordRef(room, bo),)
    assert by_seq[ana2] == (RecordRef(room, bo),)
    assert sorted(by_seq) == [ana, bo, ana2]


def test_malformed_searches_are_refused_exactly_and_the_server_keeps_serving(env: Env) -> None:
    room = env.stream("ana")
    seq = env.write(room, "ana", "Hello there.")
    cases = [
        (pb.SearchRequest(query="hi", top_k=101), IA, "top_k: must be between 1 and 100, got 101"),
        (pb.SearchRequest(query=""), IA, "query: must not be empty in HYBRID mode"),
        (
            pb.SearchRequest(query="hi", mode=9),  # type: ignore[arg-type]
            IA,
            "mode: must be SEARCH_MODE_HYBRID, SEARCH_MODE_LEXICAL or SEARCH_MODE_VECTOR",
        ),
        (
            pb.SearchRequest(query="hi", stream_ids=[room], min_seq={room: seq + 1}),
            IA,
            f"min_seq[{room}]: the stream has {seq} records; {seq + 1} is beyond its end",
        ),
        (
            pb.SearchRequest(query="hi", stream_ids=[room], min_seq={"elsewhere": 1}),
            IA,
            "min_seq[elsewhere]: names a stream this search does not look in",
        ),
        (
            pb.SearchRequest(query="hi", stream_ids=["no-such-stream"]),
            grpc.StatusCode.NOT_FOUND,
            "stream 'no-such-stream' not found",
        ),
        (
            pb.SearchRequest(query="hi", query_vector=[1.0, 0.0]),
            IA,
            "query_vector: this server embeds queries itself; send the query as text (a "
            "query_vector needs a server run with --embedder client)",
        ),
        (
            pb.SearchRequest(query="hi", filter=pb.SearchFilter(tags_any=["bad\ttag"])),
            IA,
            None,
        ),
    ]
    for request, code, details in cases:
        error = rpc_error(env.raw.Search, request)
        assert error.code() == code, request
        if details is not None:
            assert error.details() == details
    hits = env.client.recall.search("hello", stream_ids=[room], min_seq={room: seq})
    assert seqs(hits) == [seq]


def test_a_write_carrying_a_vector_is_refused_by_a_server_that_embeds(env: Env) -> None:
    room = env.stream("ana")
    error = rpc_error(
        env.raw.Write,
        pb.WriteRequest(
            stream_id=room, entry=pb.WriteEntry(source_agent_id="ana", content="x", vector=[1.0])
        ),
    )
    assert error.code() == IA
    assert error.details() == (
        "entry.vector: this server embeds content itself and takes no vectors from clients "
        "(send none, or run it with --embedder client)"
    )
    assert list(env.client.recall.read(room)) == []
