"""The embedders the server can be run with, end to end: vectors supplied by clients (kept in
the log, erased by a redaction), and an embedding endpoint that is down (writes go on,
searches waiting for `min_seq` answer UNAVAILABLE)."""

from __future__ import annotations

import time
from collections.abc import Callable

import grpc
import pytest

from cairn.v1 import recall_pb2 as pb
from cairn_server.auth import Role
from tests.clients import recall_client, rpc_error
from tests.servers import ServerProcess, free_port, make_key

Start = Callable[..., ServerProcess]


def test_client_vectors_feed_the_vector_lane_and_a_redaction_erases_them(
    server_factory: Start, recall_backend: list[str]
) -> None:
    server = server_factory(
        "recall_service", *recall_backend, "--embedder", "client", "--embedding-dim", "3"
    )
    key = make_key(server, "acme", Role.ADMIN)
    with grpc.insecure_channel(server.address) as channel:
        c = recall_client(channel, key)
        room = c.CreateStream(
            pb.CreateStreamRequest(kind=pb.STREAM_KIND_CONVERSATION, owner_agent_id="ana")
        ).stream.id
        vectors = {"north": [1.0, 0.0, 0.0], "east": [0.0, 1.0, 0.0], "up": [0.0, 0.0, 1.0]}
        seqs = {}
        for word, vector in vectors.items():
            entry = pb.WriteEntry(source_agent_id="ana", content=f"heading {word}", vector=vector)
            seqs[word] = c.Write(pb.WriteRequest(stream_id=room, entry=entry)).record.seq
        plain = c.Write(
            pb.WriteRequest(
                stream_id=room,
                entry=pb.WriteEntry(source_agent_id="ana", content="heading nowhere"),
            )
        ).record.seq
        wait = {room: plain}
        nearest = c.Search(
            pb.SearchRequest(
                mode=pb.SEARCH_MODE_VECTOR,
                stream_ids=[room],
                query_vector=[0.1, 0.9, 0.0],
                min_seq=wait,
            )
        )
        # The record written without a vector is in the lexical lane only.
        assert [h.record.seq for h in nearest.hits] == [seqs["east"], seqs["north"], seqs["up"]]
        lexical = c.Search(
            pb.SearchRequest(
                query="nowhere", mode=pb.SEARCH_MODE_LEXICAL, stream_ids=[room], top_k=1
            )
        )
        assert [h.record.seq for h in lexical.hits] == [plain]
        missing = rpc_error(c.Search, pb.SearchRequest(query="heading", stream_ids=[room]))
        assert (missing.code(), missing.details()) == (
            grpc.StatusCode.INVALID_ARGUMENT,
            "query_vector: is required in HYBRID mode: this server's vectors come from clients "
            "(3 dimensions)",
        )
        wrong = rpc_error(
            c.Write,
            pb.WriteRequest(
                stream_id=room,
                entry=pb.WriteEntry(source_agent_id="ana", content="x", vector=[1.0, 2.0]),
            ),
        )
        assert (wrong.code(), wrong.details()) == (
            grpc.StatusCode.INVALID_ARGUMENT,
            "entry.vector: must have 3 dimensions, got 2",
        )
        redaction = c.Redact(pb.RedactRequest(stream_id=room, seq=seqs["east"])).record.seq
        after = c.Search(
            pb.SearchRequest(
                mode=pb.SEARCH_MODE_VECTOR,
                stream_ids=[room],
                query_vector=[0.0, 1.0, 0.0],
                min_seq={room: redaction},
            )
        )
        assert [h.record.seq for h in after.hits] == [seqs["north"], seqs["up"]]


def test_writes_go_on_while_the_embedding_endpoint_is_down_and_min_seq_times_out(
    server_factory: Start, recall_backend: list[str]
) -> None:
    server = server_factory(
        "recall_service",
        *recall_backend,
        "--embedder", "openai",
        "--embedding-url", f"http://127.0.0.1:{free_port()}/v1",
        "--embedding-model", "nothing-listens",
        "--embedding-dim", "8",
        "--search-wait-seconds", "0.5",
    )  # fmt: skip
    key = make_key(server, "acme", Role.ADMIN)
    with grpc.insecure_channel(server.address) as channel:
        c = recall_client(channel, key)
        room = c.CreateStream(
            pb.CreateStreamRequest(kind=pb.STREAM_KIND_CONVERSATION, owner_agent_id="ana")
        ).stream.id
        seq = 0
        for i in range(20):
            written = c.Write(
                pb.WriteRequest(
                    stream_id=room, entry=pb.WriteEntry(source_agent_id="ana", content=f"m{i}")
                )
            )
            seq = written.record.seq
        started = time.monotonic()
        error = rpc_error(
            c.Search, pb.SearchRequest(query="m1", stream_ids=[room], min_seq={room: seq})
        )
        waited = time.monotonic() - started
        assert error.code() == grpc.StatusCode.UNAVAILABLE
        # The owner's ATTACH (seq 1) needs no embedding: applied or not, depending on
        # whether the indexer read it before the first message arrived.
        assert error.details() in {
            f"the search indexes of stream '{room}' have reached seq {applied}, not min_seq "
            f"{seq}, after waiting 0.5 s; retry"
            for applied in (0, 1)
        }
        assert 0.5 <= waited < 3.0
        # Without min_seq the search answers from what is indexed: nothing yet.
        lexical = c.Search(pb.SearchRequest(query="m1", mode=pb.SEARCH_MODE_LEXICAL))
        assert list(lexical.hits) == []
    assert "embedding endpoint http://127.0.0.1:" in server.log()


@pytest.mark.parametrize("deadline", [0.3])
def test_a_min_seq_wait_ends_within_the_callers_deadline(
    server_factory: Start, deadline: float
) -> None:
    server = server_factory(
        "recall_service",
        "--embedder", "openai",
        "--embedding-url", f"http://127.0.0.1:{free_port()}/v1",
        "--embedding-model", "nothing-listens",
        "--embedding-dim", "8",
    )  # fmt: skip
    key = make_key(server, "acme", Role.ADMIN)
    with grpc.insecure_channel(server.address) as channel:
        c = recall_client(channel, key)
        room = c.CreateStream(
            pb.CreateStreamRequest(kind=pb.STREAM_KIND_CONVERSATION, owner_agent_id="ana")
        ).stream.id
        c.Write(
            pb.WriteRequest(
                stream_id=room, entry=pb.WriteEntry(source_agent_id="ana", content="hello")
            )
        )
        error = rpc_error(
            c.Search,
            pb.SearchRequest(query="hello", stream_ids=[room], min_seq={room: 2}),
            timeout=deadline,
        )
        # The server gives up just before the deadline, with its own message.
        assert error.code() == grpc.StatusCode.UNAVAILABLE
        assert "not min_seq 2" in str(error.details())
