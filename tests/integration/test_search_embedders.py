"""The embedders the server can be run with, end to end: vectors supplied by clients (kept in
the log, erased by a redaction), and an embedding endpoint that is down (writes go on,
searches waiting for `min_seq` answer UNAVAILABLE)."""

from __future__ import annotations

import re
import time
import urllib.request
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


def lag_metrics(port: int) -> dict[str, float]:
    """The index lag gauges from /metrics, by name and projection."""
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    found = re.findall(r'(cairn_index_lag_\w+)\{projection="(\w+)"\} (\S+)', body)
    return {f"{name}/{lane}": float(value) for name, lane, value in found}


def test_writes_go_on_while_the_embedding_endpoint_is_down_and_min_seq_times_out(
    server_factory: Start, recall_backend: list[str]
) -> None:
    metrics_port = free_port()
    server = server_factory(
        "recall_service",
        *recall_backend,
        "--embedder", "openai",
        "--embedding-url", f"http://127.0.0.1:{free_port()}/v1",
        "--embedding-model", "nothing-listens",
        "--embedding-dim", "8",
        "--search-wait-seconds", "0.5",
        "--metrics-port", str(metrics_port),
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
        # Every record of the log is behind (on PostgreSQL the module's other tests share it).
        in_log = sum(st.size for st in c.ListStreams(pb.ListStreamsRequest(page_size=100)).streams)
    assert "embedding endpoint http://127.0.0.1:" in server.log()
    time.sleep(1.2)  # the gauges are refreshed at most once a second
    lag = lag_metrics(metrics_port)
    # All of them, less the owner's ATTACH if the indexer applied it alone first.
    assert lag["cairn_index_lag_records/lexical"] in (in_log, in_log - 1)
    assert lag["cairn_index_lag_records/vector"] in (in_log, in_log - 1)
    assert lag["cairn_index_lag_seconds/lexical"] > 0.5
    assert lag["cairn_index_lag_seconds/vector"] > 0.5


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


def test_a_caught_up_server_reports_no_lag_and_counts_what_it_embedded(
    server_factory: Start,
) -> None:
    metrics_port = free_port()
    server = server_factory("recall_service", "--metrics-port", str(metrics_port))
    key = make_key(server, "acme", Role.ADMIN)
    with grpc.insecure_channel(server.address) as channel:
        c = recall_client(channel, key)
        room = c.CreateStream(
            pb.CreateStreamRequest(kind=pb.STREAM_KIND_CONVERSATION, owner_agent_id="ana")
        ).stream.id
        entries = [pb.WriteEntry(source_agent_id="ana", content=f"line {i}") for i in range(5)]
        last = c.WriteBatch(pb.WriteBatchRequest(stream_id=room, entries=entries)).records[-1]
        c.Search(pb.SearchRequest(query="line", stream_ids=[room], min_seq={room: last.seq}))
    time.sleep(1.2)
    body = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5).read()
    text = body.decode()
    assert lag_metrics(metrics_port) == {
        "cairn_index_lag_records/lexical": 0.0,
        "cairn_index_lag_records/vector": 0.0,
        "cairn_index_lag_seconds/lexical": 0.0,
        "cairn_index_lag_seconds/vector": 0.0,
    }
    embedded = re.search(
        r'cairn_embedded_texts_total\{embedder="wordllama-l2_supercat-256"\} (\S+)', text
    )
    assert embedded is not None and float(embedded.group(1)) >= 5.0
    assert 'cairn_embedding_seconds_total{embedder="wordllama-l2_supercat-256"}' in text
