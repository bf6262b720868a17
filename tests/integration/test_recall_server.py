"""The recall service over real gRPC, against a server process on a free port."""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import grpc
import httpx
import pytest
from google.protobuf import timestamp_pb2
from google.rpc import error_details_pb2
from grpc_status import rpc_status
from prometheus_client.parser import text_string_to_metric_families

from cairn import verify
from cairn.v1 import common_pb2
from cairn.v1 import recall_pb2 as pb
from cairn_server.auth import Role
from recall_service.signing import KEY_FILE
from tests.clients import recall_client, rpc_error
from tests.servers import ServerProcess, free_port, make_key


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory, recall_backend: list[str]
) -> Iterator[ServerProcess]:
    data_dir = tmp_path_factory.mktemp("recall")
    proc = ServerProcess("recall_service", data_dir, free_port(), recall_backend, {}).start()
    yield proc
    proc.kill()


@pytest.fixture(scope="module")
def channel(server: ServerProcess) -> Iterator[grpc.Channel]:
    with grpc.insecure_channel(server.address) as ch:
        yield ch


@pytest.fixture(scope="module")
def admin(server: ServerProcess, channel: grpc.Channel) -> Any:
    return recall_client(channel, make_key(server, "acme"))


@pytest.fixture(scope="module")
def agents(server: ServerProcess, channel: grpc.Channel) -> dict[str, Any]:
    return {
        name: recall_client(channel, make_key(server, "acme", Role.AGENT, name))
        for name in ("alice", "bob", "carol")
    }


def conversation(admin: Any, *writers: str) -> pb.Stream:
    """A conversation owned by alice, with the other names attached as writers."""
    stream = admin.CreateStream(
        pb.CreateStreamRequest(kind=pb.STREAM_KIND_CONVERSATION, owner_agent_id="alice")
    ).stream
    for name in writers:
        admin.Attach(
            pb.AttachRequest(stream_id=stream.id, agent_id=name, role=pb.PARTICIPANT_ROLE_WRITER)
        )
    current: pb.Stream = admin.GetStream(pb.GetStreamRequest(stream_id=stream.id)).stream
    return current


def say(client: Any, stream_id: str, content: str, **entry: Any) -> pb.WriteResponse:
    reply: pb.WriteResponse = client.Write(
        pb.WriteRequest(stream_id=stream_id, entry=pb.WriteEntry(content=content, **entry))
    )
    return reply


def refusal(client: Any, stream_id: str, **entry: Any) -> grpc.RpcError:
    """The error of a write that must be refused."""
    return rpc_error(
        client.Write, pb.WriteRequest(stream_id=stream_id, entry=pb.WriteEntry(**entry))
    )


def read_all(client: Any, stream_id: str, **query: Any) -> list[pb.Record]:
    records: list[pb.Record] = []
    token = ""
    while True:
        reply = client.Read(pb.ReadRequest(stream_id=stream_id, page_token=token, **query))
        records.extend(reply.records)
        token = reply.next_page_token
        if not token:
            return records


def size_of(admin: Any, stream_id: str) -> int:
    return int(admin.GetStream(pb.GetStreamRequest(stream_id=stream_id)).stream.size)


# --- the walkthrough ------------------------------------------------------------------------


def test_shared_conversation_verifies_end_to_end_on_the_client(
    admin: Any, agents: dict[str, Any]
) -> None:
    stream = conversation(admin, "bob")
    alice, bob = agents["alice"], agents["bob"]
    first = say(alice, stream.id, "Bob, the deploy is at 5.", tags=["ops"])
    second = say(bob, stream.id, "Noted, I'll be there.", metadata_json='{"mood": "calm"}')
    assert (first.record.seq, second.record.seq) == (3, 4)
    assert second.record.metadata_json == '{"mood":"calm"}'

    messages = read_all(alice, stream.id)
    assert [(r.seq, r.source_agent_id, r.content) for r in messages] == [
        (3, "alice", "Bob, the deploy is at 5."),
        (4, "bob", "Noted, I'll be there."),
    ]
    everything = read_all(bob, stream.id, include_events=True)
    assert [(r.kind, r.subject_agent_id, r.role) for r in everything[:2]] == [
        (pb.RECORD_KIND_ATTACH, "alice", pb.PARTICIPANT_ROLE_OWNER),
        (pb.RECORD_KIND_ATTACH, "bob", pb.PARTICIPANT_ROLE_WRITER),
    ]

    # The client trusts nothing but the public key it pinned.
    key = admin.GetPublicKey(pb.GetPublicKeyRequest())
    assert key.algorithm == "Ed25519"
    assert len(key.public_key) == 32
    assert verify.genesis_hash("acme", stream.id, stream.kind, stream.created_at) == stream.genesis
    head = verify.verify_records(everything, stream.genesis)
    checkpoint = bob.GetCheckpoint(pb.GetCheckpointRequest(stream_id=stream.id)).checkpoint
    assert checkpoint == second.checkpoint
    assert (checkpoint.size, checkpoint.chain_head) == (4, head)
    verify.verify_checkpoint(checkpoint, key.public_key)
    verify.verify_log(everything, stream.genesis, checkpoint, key.public_key)

    proof = bob.GetInclusionProof(pb.GetInclusionProofRequest(stream_id=stream.id, seq=3))
    assert (proof.leaf_index, proof.tree_size, proof.leaf_hash) == (2, 4, first.record.leaf_hash)
    assert proof.checkpoint == checkpoint
    verify.verify_inclusion(proof.leaf_hash, 2, 4, list(proof.proof), checkpoint.root)

    third = say(alice, stream.id, "Moved to 6.")
    consistency = bob.GetConsistencyProof(
        pb.GetConsistencyProofRequest(stream_id=stream.id, from_size=4)
    )
    assert (consistency.from_size, consistency.to_size) == (4, 5)
    assert consistency.from_root == checkpoint.root
    assert consistency.to_root == third.checkpoint.root
    verify.verify_consistency(4, 5, list(consistency.proof), checkpoint.root, third.checkpoint.root)
    verdict = bob.VerifyStream(
        pb.VerifyStreamRequest(stream_id=stream.id, trusted_checkpoint=checkpoint)
    )
    assert (verdict.ok, verdict.size, verdict.first_bad_seq, verdict.reason) == (True, 5, 0, "")
    assert (verdict.chain_head, verdict.root) == (
        third.checkpoint.chain_head,
        third.checkpoint.root,
    )
    assert verdict.checkpoints_checked == 5


def test_participants_replay_from_the_log_at_any_seq(admin: Any) -> None:
    stream = conversation(admin, "bob", "carol")
    detached = admin.Detach(pb.DetachRequest(stream_id=stream.id, agent_id="bob")).record
    promoted = admin.Attach(
        pb.AttachRequest(stream_id=stream.id, agent_id="carol", role=pb.PARTICIPANT_ROLE_OWNER)
    )
    assert (detached.seq, detached.kind, detached.subject_agent_id) == (
        4,
        pb.RECORD_KIND_DETACH,
        "bob",
    )
    assert promoted.record.seq == 5

    def at(seq: int) -> list[tuple[str, int, int]]:
        reply = admin.ListParticipants(pb.ListParticipantsRequest(stream_id=stream.id, at_seq=seq))
        return [(p.agent_id, p.role, p.attached_seq) for p in reply.participants]

    owner, writer = pb.PARTICIPANT_ROLE_OWNER, pb.PARTICIPANT_ROLE_WRITER
    assert at(1) == [("alice", owner, 1)]
    assert at(3) == [("alice", owner, 1), ("bob", writer, 2), ("carol", writer, 3)]
    assert at(4) == [("alice", owner, 1), ("carol", writer, 3)]
    assert at(0) == [("alice", owner, 1), ("carol", owner, 5)]
    again = admin.Attach(
        pb.AttachRequest(stream_id=stream.id, agent_id="carol", role=pb.PARTICIPANT_ROLE_OWNER)
    )
    assert not again.HasField("record")
    assert size_of(admin, stream.id) == 5
    error = rpc_error(admin.Detach, pb.DetachRequest(stream_id=stream.id, agent_id="bob"))
    assert error.code() is grpc.StatusCode.NOT_FOUND
    assert error.details() == f"agent 'bob' is not a participant of stream '{stream.id}'"
    error = rpc_error(
        admin.ListParticipants, pb.ListParticipantsRequest(stream_id=stream.id, at_seq=6)
    )
    assert error.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert error.details() == "at_seq: must be between 0 and the stream's size 5, got 6"


# --- writes ---------------------------------------------------------------------------------


def test_retry_with_the_same_idempotency_key_returns_the_first_record(
    admin: Any, agents: dict[str, Any]
) -> None:
    stream = conversation(admin)
    first = say(agents["alice"], stream.id, "once", idempotency_key="msg-1")
    retry = say(agents["alice"], stream.id, "once", idempotency_key="msg-1")
    assert (first.replayed, retry.replayed) == (False, True)
    assert retry.record == first.record
    assert size_of(admin, stream.id) == 2
    error = rpc_error(say, agents["alice"], stream.id, "twice", idempotency_key="msg-1")
    assert error.code() is grpc.StatusCode.ALREADY_EXISTS
    assert error.details() == (
        f"entry.idempotency_key 'msg-1' was used on stream '{stream.id}' for a different write "
        "(seq 2)"
    )
    assert size_of(admin, stream.id) == 2


def test_write_batch_is_atomic_and_replays_known_keys(admin: Any, agents: dict[str, Any]) -> None:
    stream = conversation(admin, "bob")
    say(agents["bob"], stream.id, "earlier", idempotency_key="k0")
    bad = rpc_error(
        agents["alice"].WriteBatch,
        pb.WriteBatchRequest(
            stream_id=stream.id,
            entries=[pb.WriteEntry(content="fine"), pb.WriteEntry(content="")],
        ),
    )
    assert bad.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert bad.details() == "entries[1].content: must not be empty"
    spoof = rpc_error(
        agents["bob"].WriteBatch,
        pb.WriteBatchRequest(
            stream_id=stream.id,
            entries=[
                pb.WriteEntry(content="mine"),
                pb.WriteEntry(content="x", source_agent_id="alice"),
            ],
        ),
    )
    assert spoof.code() is grpc.StatusCode.PERMISSION_DENIED
    assert size_of(admin, stream.id) == 3

    reply = agents["bob"].WriteBatch(
        pb.WriteBatchRequest(
            stream_id=stream.id,
            entries=[
                pb.WriteEntry(content="a", idempotency_key="k1"),
                pb.WriteEntry(content="earlier", idempotency_key="k0"),
                pb.WriteEntry(content="b"),
            ],
        )
    )
    assert [r.seq for r in reply.records] == [4, 3, 5]
    assert reply.checkpoint.size == 5
    duplicate = rpc_error(
        agents["alice"].WriteBatch,
        pb.WriteBatchRequest(
            stream_id=stream.id,
            entries=[
                pb.WriteEntry(content="a", idempotency_key="k9"),
                pb.WriteEntry(content="b", idempotency_key="k9"),
            ],
        ),
    )
    assert duplicate.details() == "entries[1].idempotency_key: 'k9' is used by entries[0] too"
    empty = rpc_error(agents["alice"].WriteBatch, pb.WriteBatchRequest(stream_id=stream.id))
    assert empty.details() == "entries: must hold at least one entry"
    assert size_of(admin, stream.id) == 5


BAD_ENTRIES = [
    (pb.WriteEntry(content=""), "entry.content", "must not be empty"),
    (
        pb.WriteEntry(content="x" * 65537),
        "entry.content",
        "is 65537 bytes of UTF-8, over the limit of 65536 bytes",
    ),
    (
        pb.WriteEntry(content="é" * 32769),
        "entry.content",
        "is 65538 bytes of UTF-8, over the limit of 65536 bytes",
    ),
    (
        pb.WriteEntry(content="hi", tags=[f"t{i}" for i in range(65)]),
        "entry.tags",
        "at most 64 tags, got 65",
    ),
    (
        pb.WriteEntry(content="hi", tags=["ok", ""]),
        "entry.tags[1]",
        "tags are 1-100 printable characters, got ''",
    ),
    (
        pb.WriteEntry(content="hi", metadata_json="[1, 2]"),
        "entry.metadata_json",
        "must be a JSON object, got an array",
    ),
    (
        pb.WriteEntry(content="hi", metadata_json='"text"'),
        "entry.metadata_json",
        "must be a JSON object, got a string",
    ),
    (
        pb.WriteEntry(content="hi", metadata_json="null"),
        "entry.metadata_json",
        "must be a JSON object, got null",
    ),
    (
        pb.WriteEntry(content="hi", metadata_json="{'a': 1}"),
        "entry.metadata_json",
        "is not valid JSON: Expecting property name enclosed in double quotes: line 1 "
        "column 2 (char 1)",
    ),
    (
        pb.WriteEntry(content="hi", metadata_json='{"a": NaN}'),
        "entry.metadata_json",
        "is not valid JSON: NaN is not JSON",
    ),
    (
        pb.WriteEntry(content="hi", source_agent_id="no spaces"),
        "entry.source_agent_id",
        "'no spaces' is not a valid id: use 1-128 characters of [A-Za-z0-9_.:@-], starting "
        "with a letter or digit",
    ),
    (
        pb.WriteEntry(content="hi", idempotency_key="k" * 201),
        "entry.idempotency_key",
        "must be at most 200 printable characters",
    ),
    (
        pb.WriteEntry(content="nul\x00byte"),
        "entry.content",
        "must not contain NUL characters (U+0000)",
    ),
    (
        pb.WriteEntry(content="hi", occurred_at=timestamp_pb2.Timestamp(seconds=-1)),
        "entry.occurred_at",
        "must be on or after 1970-01-01T00:00:00Z",
    ),
]


@pytest.mark.parametrize(
    ("entry", "field", "description"),
    BAD_ENTRIES,
    ids=[
        "empty",
        "too-long",
        "too-long-utf8",
        "65-tags",
        "empty-tag",
        "array-metadata",
        "string-metadata",
        "null-metadata",
        "invalid-json",
        "nan",
        "bad-source",
        "long-key",
        "nul",
        "said-before-1970",
    ],
)
def test_bad_entry_is_refused_naming_the_field_and_changes_nothing(
    admin: Any, agents: dict[str, Any], entry: pb.WriteEntry, field: str, description: str
) -> None:
    stream = conversation(admin)
    error = rpc_error(agents["alice"].Write, pb.WriteRequest(stream_id=stream.id, entry=entry))
    assert error.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert error.details() == f"{field}: {description}"
    status = rpc_status.from_call(error)  # type: ignore[arg-type]
    assert status is not None
    detail = error_details_pb2.BadRequest()
    status.details[0].Unpack(detail)
    assert [(v.field, v.description) for v in detail.field_violations] == [(field, description)]
    assert size_of(admin, stream.id) == 1
    # The server keeps serving, and the largest content that fits is accepted.
    fits = say(agents["alice"], stream.id, "x" * 65536)
    assert fits.record.seq == 2


def test_history_written_after_the_fact_keeps_when_it_was_said(
    admin: Any, agents: dict[str, Any]
) -> None:
    """`occurred_at` is kept in the hashed record beside the server's time and comes back
    as it was given; the client recomputes every hash (domain v2 for such a record); a retry
    that gives another time is a different write; a time later than the server's is
    refused and writes nothing."""
    stream = conversation(admin, "bob")
    alice, bob = agents["alice"], agents["bob"]
    said = timestamp_pb2.Timestamp(seconds=1683554160, nanos=654321000)
    old = say(alice, stream.id, "We met at the lake.", occurred_at=said, idempotency_key="k1")
    plain = say(bob, stream.id, "Nice.")
    assert old.record.occurred_at == said
    assert old.record.created_at.seconds > said.seconds
    assert not plain.record.HasField("occurred_at")
    assert old.record.leaf_hash == verify.leaf_hash(old.record)
    assert verify.record_bytes(old.record)[:26] == b"\x00\x00\x00\x16cairn.recall.record.v2"
    assert verify.record_bytes(old.record)[-8:] == (1683554160654321).to_bytes(8, "big")
    assert verify.record_bytes(plain.record)[:26] == b"\x00\x00\x00\x16cairn.recall.record.v1"

    records = read_all(bob, stream.id, include_events=True)
    assert [(r.seq, r.HasField("occurred_at")) for r in records] == [
        (1, False),
        (2, False),
        (3, True),
        (4, False),
    ]
    assert records[2] == old.record
    key = admin.GetPublicKey(pb.GetPublicKeyRequest()).public_key
    verify.verify_log(records, stream.genesis, plain.checkpoint, key)
    verdict = bob.VerifyStream(pb.VerifyStreamRequest(stream_id=stream.id))
    assert (verdict.ok, verdict.size, verdict.reason) == (True, 4, "")

    again = say(alice, stream.id, "We met at the lake.", occurred_at=said, idempotency_key="k1")
    assert (again.replayed, again.record) == (True, old.record)
    other = refusal(
        alice,
        stream.id,
        content="We met at the lake.",
        occurred_at=timestamp_pb2.Timestamp(seconds=1683554161),
        idempotency_key="k1",
    )
    assert other.code() is grpc.StatusCode.ALREADY_EXISTS
    assert other.details() == (
        f"entry.idempotency_key 'k1' was used on stream '{stream.id}' for a different write (seq 3)"
    )

    future = refusal(
        alice,
        stream.id,
        content="From the future.",
        occurred_at=timestamp_pb2.Timestamp(seconds=4102444800),
    )
    assert future.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert re.fullmatch(
        r"entry\.occurred_at: is 2100-01-01T00:00:00\.000000Z, later than the server's time "
        r"20\d\d-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z: a message cannot have been said after it was "
        r"written",
        future.details() or "",
    ), future.details()
    assert size_of(admin, stream.id) == 4

    # In a batch, each entry has its own time, and one later than the server's refuses the
    # whole batch, naming the entry.
    batch = admin.WriteBatch(
        pb.WriteBatchRequest(
            stream_id=stream.id,
            entries=[
                pb.WriteEntry(source_agent_id="bob", content="Then lunch.", occurred_at=said),
                pb.WriteEntry(source_agent_id="bob", content="Now."),
            ],
        )
    )
    assert [r.HasField("occurred_at") for r in batch.records] == [True, False]
    refused = rpc_error(
        admin.WriteBatch,
        pb.WriteBatchRequest(
            stream_id=stream.id,
            entries=[
                pb.WriteEntry(source_agent_id="bob", content="Fine."),
                pb.WriteEntry(
                    source_agent_id="bob",
                    content="Later.",
                    occurred_at=timestamp_pb2.Timestamp(seconds=4102444800),
                ),
            ],
        ),
    )
    assert refused.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert (refused.details() or "").startswith(
        "entries[1].occurred_at: is 2100-01-01T00:00:00.000000Z, later than the server's time"
    )
    assert size_of(admin, stream.id) == 6

    # Redacted, it keeps the time it was said and the log still verifies.
    alice.Redact(pb.RedactRequest(stream_id=stream.id, seq=3, reason="asked to forget"))
    records = read_all(bob, stream.id, include_events=True)
    assert (records[2].redacted, records[2].content, records[2].occurred_at) == (True, "", said)
    latest = bob.GetCheckpoint(pb.GetCheckpointRequest(stream_id=stream.id)).checkpoint
    verify.verify_log(records, stream.genesis, latest, key)
    verdict = bob.VerifyStream(pb.VerifyStreamRequest(stream_id=stream.id))
    assert (verdict.ok, verdict.size, verdict.reason) == (True, 7, "")


def test_unknown_stream_is_not_found(agents: dict[str, Any]) -> None:
    for call, request in (
        (
            agents["alice"].Write,
            pb.WriteRequest(stream_id="nope", entry=pb.WriteEntry(content="x")),
        ),
        (agents["alice"].Read, pb.ReadRequest(stream_id="nope")),
        (agents["alice"].GetCheckpoint, pb.GetCheckpointRequest(stream_id="nope")),
    ):
        error = rpc_error(call, request)
        assert error.code() is grpc.StatusCode.NOT_FOUND
        assert error.details() == "stream 'nope' not found"


def test_create_stream_refuses_bad_requests(admin: Any) -> None:
    ia = grpc.StatusCode.INVALID_ARGUMENT
    cases = [
        (
            pb.CreateStreamRequest(),
            "kind: must be STREAM_KIND_CONVERSATION, STREAM_KIND_ARCHIVAL or STREAM_KIND_MESSAGES",
            ia,
        ),
        (
            pb.CreateStreamRequest(kind=pb.STREAM_KIND_CONVERSATION, stream_id="-x"),
            "stream_id: '-x' is not a valid id: use 1-128 characters of [A-Za-z0-9_.:@-], "
            "starting with a letter or digit",
            ia,
        ),
    ]
    for request, message, code in cases:
        error = rpc_error(admin.CreateStream, request)
        assert (error.code(), error.details()) == (code, message)
    made = admin.CreateStream(
        pb.CreateStreamRequest(kind=pb.STREAM_KIND_MESSAGES, stream_id="messages-agent-1")
    )
    assert (made.stream.id, made.stream.size, made.checkpoint.size) == ("messages-agent-1", 0, 0)
    assert not made.HasField("owner_attach")
    again = rpc_error(
        admin.CreateStream,
        pb.CreateStreamRequest(kind=pb.STREAM_KIND_MESSAGES, stream_id="messages-agent-1"),
    )
    assert again.code() is grpc.StatusCode.ALREADY_EXISTS
    assert again.details() == "stream 'messages-agent-1' already exists"


def test_admin_and_service_writes_must_name_their_author(admin: Any) -> None:
    stream = conversation(admin)
    error = rpc_error(say, admin, stream.id, "who am I?")
    assert error.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert error.details() == (
        "entry.source_agent_id: is required for admin keys, which speak for no agent of their "
        "own: name the participant the record speaks for"
    )


# --- reads ----------------------------------------------------------------------------------


def test_read_filters_by_author_seq_time_and_tags(admin: Any, agents: dict[str, Any]) -> None:
    stream = conversation(admin, "bob")
    alice, bob = agents["alice"], agents["bob"]
    say(alice, stream.id, "a1", tags=["x"])
    say(bob, stream.id, "b1", tags=["x", "y"])
    middle = say(alice, stream.id, "a2", tags=["y"]).record
    time.sleep(0.01)
    say(bob, stream.id, "b2")

    def contents(**query: Any) -> list[str]:
        return [r.content for r in read_all(alice, stream.id, **query)]

    assert contents() == ["a1", "b1", "a2", "b2"]
    assert contents(source_agent_ids=["bob"]) == ["b1", "b2"]
    assert contents(seqs=pb.SeqRange(first=4, last=5)) == ["b1", "a2"]
    assert contents(seqs=pb.SeqRange(first=5)) == ["a2", "b2"]
    assert contents(tags=["x"]) == ["a1", "b1"]
    assert contents(tags=["x", "y"]) == ["a1", "b1", "a2"]
    assert contents(tags=["x", "y"], match_all_tags=True) == ["b1"]
    assert contents(newest_first=True) == ["b2", "a2", "b1", "a1"]
    end = timestamp_pb2.Timestamp()
    end.CopyFrom(middle.created_at)
    end.nanos += 1000
    assert contents(time_range=common_pb2.TimeRange(end=end)) == ["a1", "b1", "a2"]
    assert contents(time_range=common_pb2.TimeRange(start=end)) == ["b2"]
    assert [r.seq for r in read_all(alice, stream.id, include_events=True)] == [1, 2, 3, 4, 5, 6]
    error = rpc_error(
        alice.Read, pb.ReadRequest(stream_id=stream.id, seqs=pb.SeqRange(first=5, last=4))
    )
    assert error.details() == "seqs: first (5) is after last (4)"


def test_read_pages_are_stable_while_others_write(admin: Any, agents: dict[str, Any]) -> None:
    stream = conversation(admin)
    alice = agents["alice"]
    for i in range(5):
        say(alice, stream.id, f"m{i}")
    page = alice.Read(pb.ReadRequest(stream_id=stream.id, page_size=2))
    assert [r.content for r in page.records] == ["m0", "m1"]
    say(alice, stream.id, "m5")
    rest = read_all(alice, stream.id, page_size=2)
    assert [r.content for r in rest] == [f"m{i}" for i in range(6)]
    second = alice.Read(
        pb.ReadRequest(stream_id=stream.id, page_size=2, page_token=page.next_page_token)
    )
    assert [r.content for r in second.records] == ["m2", "m3"]
    error = rpc_error(
        alice.Read,
        pb.ReadRequest(stream_id=stream.id, page_token=page.next_page_token, newest_first=True),
    )
    assert error.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert error.details() == (
        "page_token: was issued for a different query; keep the filters of the first page"
    )


def test_overlapping_writes_pairs_different_authors_within_the_window(
    admin: Any, agents: dict[str, Any]
) -> None:
    stream = conversation(admin, "bob")
    alice, bob = agents["alice"], agents["bob"]
    a = say(alice, stream.id, "I'll take the ticket").record
    b = say(bob, stream.id, "No, I will").record
    say(bob, stream.id, "Really")
    time.sleep(0.6)
    say(alice, stream.id, "Fine")
    reply = alice.OverlappingWrites(
        pb.OverlappingWritesRequest(stream_id=stream.id, within_seconds=0.5)
    )
    pairs = [(p.earlier.content, p.later.content) for p in reply.pairs]
    assert pairs == [("I'll take the ticket", "No, I will"), ("I'll take the ticket", "Really")]
    first = reply.pairs[0]
    apart = (b.created_at.ToMicroseconds() - a.created_at.ToMicroseconds()) / 1e6
    assert first.seconds_apart == pytest.approx(apart)
    paged = alice.OverlappingWrites(
        pb.OverlappingWritesRequest(stream_id=stream.id, within_seconds=0.5, page_size=1)
    )
    following = alice.OverlappingWrites(
        pb.OverlappingWritesRequest(
            stream_id=stream.id,
            within_seconds=0.5,
            page_size=1,
            page_token=paged.next_page_token,
        )
    )
    assert [p.later.content for p in [*paged.pairs, *following.pairs]] == ["No, I will", "Really"]
    assert following.next_page_token == ""
    error = rpc_error(alice.OverlappingWrites, pb.OverlappingWritesRequest(stream_id=stream.id))
    assert error.details() == "within_seconds: must be more than 0 and at most 86400, got 0"


# --- redaction, proofs, keys ----------------------------------------------------------------


def test_redaction_erases_content_and_the_log_still_verifies(
    admin: Any, agents: dict[str, Any]
) -> None:
    stream = conversation(admin, "bob")
    alice, bob = agents["alice"], agents["bob"]
    secret = say(bob, stream.id, "the password is hunter2").record
    denied = rpc_error(bob.Redact, pb.RedactRequest(stream_id=stream.id, seq=secret.seq))
    assert denied.code() is grpc.StatusCode.PERMISSION_DENIED
    redacted = alice.Redact(
        pb.RedactRequest(stream_id=stream.id, seq=secret.seq, reason="credential")
    ).record
    assert (redacted.seq, redacted.kind, redacted.target_seq, redacted.content) == (
        4,
        pb.RECORD_KIND_REDACTION,
        3,
        "credential",
    )
    erased = read_all(alice, stream.id, seqs=pb.SeqRange(first=3, last=3))[0]
    assert (erased.content, erased.salt, erased.redacted, erased.redacted_by_seq) == (
        "",
        b"",
        True,
        4,
    )
    assert (erased.content_hash, erased.leaf_hash) == (secret.content_hash, secret.leaf_hash)
    records = read_all(alice, stream.id, include_events=True)
    head = verify.verify_records(records, stream.genesis)
    assert (
        head
        == alice.GetCheckpoint(pb.GetCheckpointRequest(stream_id=stream.id)).checkpoint.chain_head
    )
    assert alice.VerifyStream(pb.VerifyStreamRequest(stream_id=stream.id)).ok is True
    again = rpc_error(alice.Redact, pb.RedactRequest(stream_id=stream.id, seq=3))
    assert again.code() is grpc.StatusCode.FAILED_PRECONDITION
    assert again.details() == "record 3 is redacted already (by record 4)"
    event = rpc_error(alice.Redact, pb.RedactRequest(stream_id=stream.id, seq=1))
    assert event.code() is grpc.StatusCode.FAILED_PRECONDITION
    assert event.details() == "only MESSAGE records can be redacted; record 1 is of kind ATTACH"
    beyond = rpc_error(alice.Redact, pb.RedactRequest(stream_id=stream.id, seq=9))
    assert beyond.details() == "seq: must be between 1 and the stream's size 4, got 9"


def test_proof_requests_outside_the_tree_are_refused(admin: Any) -> None:
    stream = conversation(admin, "bob")
    cases = [
        (
            admin.GetInclusionProof,
            pb.GetInclusionProofRequest(stream_id=stream.id, seq=0),
            "seq: must be between 1 and the tree size 2, got 0",
        ),
        (
            admin.GetInclusionProof,
            pb.GetInclusionProofRequest(stream_id=stream.id, seq=2, tree_size=1),
            "seq: must be between 1 and the tree size 1, got 2",
        ),
        (
            admin.GetInclusionProof,
            pb.GetInclusionProofRequest(stream_id=stream.id, seq=1, tree_size=3),
            "tree_size: must be between 0 and the stream's size 2, got 3",
        ),
        (
            admin.GetConsistencyProof,
            pb.GetConsistencyProofRequest(stream_id=stream.id, from_size=2, to_size=1),
            "from_size: must be between 0 and to_size 1, got 2",
        ),
    ]
    for call, request, message in cases:
        error = rpc_error(call, request)
        assert (error.code(), error.details()) == (grpc.StatusCode.INVALID_ARGUMENT, message)
    old = admin.GetInclusionProof(
        pb.GetInclusionProofRequest(stream_id=stream.id, seq=1, tree_size=1)
    )
    assert (list(old.proof), old.root, old.HasField("checkpoint")) == ([], old.leaf_hash, False)


def test_forged_trusted_checkpoint_is_refused(admin: Any) -> None:
    stream = conversation(admin)
    checkpoint = admin.GetCheckpoint(pb.GetCheckpointRequest(stream_id=stream.id)).checkpoint
    forged = pb.Checkpoint()
    forged.CopyFrom(checkpoint)
    forged.chain_head = bytes(32)
    error = rpc_error(
        admin.VerifyStream, pb.VerifyStreamRequest(stream_id=stream.id, trusted_checkpoint=forged)
    )
    assert error.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert error.details() == (
        "trusted_checkpoint: its signature does not verify under this server's key"
    )


def test_signing_key_is_created_once_private_and_survives_restarts(
    server_factory: Any, tmp_path: Any
) -> None:
    # The key is a file in the data directory whichever store holds the log (a fleet's
    # replicas share it: test_recall_replicas.py).
    data_dir = tmp_path / "data"
    first = server_factory("recall_service", data_dir=data_dir)
    path = data_dir / KEY_FILE
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    key = make_key(first, "acme")
    with grpc.insecure_channel(first.address) as ch:
        before = recall_client(ch, key).GetPublicKey(pb.GetPublicKeyRequest())
    first.restart()
    with grpc.insecure_channel(first.address) as ch:
        after = recall_client(ch, key).GetPublicKey(pb.GetPublicKeyRequest())
    assert after == before
    assert before.key_id == verify_key_id(before.public_key)


def verify_key_id(public_key: bytes) -> str:
    import hashlib

    return hashlib.sha256(public_key).hexdigest()[:16]


# --- metrics --------------------------------------------------------------------------------


def scrape(port: int) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Samples of the /metrics page, keyed by name and label set."""
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def test_metrics_count_durable_appends_by_kind_and_rpcs_by_code(
    server_factory: Any, recall_backend: list[str]
) -> None:
    port = free_port()
    proc = server_factory("recall_service", *recall_backend, "--metrics-port", str(port))
    with grpc.insecure_channel(proc.address) as ch:
        admin = recall_client(ch, make_key(proc, "acme"))
        stream = conversation(admin, "bob")  # two ATTACH records
        entries = [pb.WriteEntry(content=c, source_agent_id="bob") for c in ("a", "b")]
        admin.WriteBatch(pb.WriteBatchRequest(stream_id=stream.id, entries=entries))
        keyed = pb.WriteEntry(content="c", source_agent_id="bob", idempotency_key="k")
        for _ in range(2):  # the retry appends nothing
            admin.Write(pb.WriteRequest(stream_id=stream.id, entry=keyed))
        bad = pb.WriteEntry(content="", source_agent_id="bob")
        rpc_error(admin.Write, pb.WriteRequest(stream_id=stream.id, entry=bad))
        admin.Redact(pb.RedactRequest(stream_id=stream.id, seq=3, reason="no"))
        admin.Detach(pb.DetachRequest(stream_id=stream.id, agent_id="bob"))
    samples = scrape(port)
    appended = {
        dict(labels)["kind"]: value
        for (name, labels), value in samples.items()
        if name == "cairn_log_appends_total"
    }
    assert appended == {"attach": 2, "message": 3, "redaction": 1, "detach": 1}

    def requests(method: str, code: str) -> float:
        labels = frozenset({("service", "recall"), ("method", method), ("code", code)})
        return samples["cairn_rpc_requests_total", labels]

    assert (requests("Write", "OK"), requests("Write", "INVALID_ARGUMENT")) == (2, 1)
    assert (requests("WriteBatch", "OK"), requests("Redact", "OK")) == (1, 1)


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (
            ["--database-url", "postgresql://postgres@127.0.0.1:1/none"],
            'connection failed: connection to server at "127.0.0.1", port 1 failed: '
            "Connection refused",
        ),
        (
            [
                "--database-url",
                "postgresql://postgres@127.0.0.1:1/none",
                "--database-schema",
                "A-b",
            ],
            "invalid PostgreSQL schema name 'A-b'",
        ),
    ],
    ids=["unreachable", "bad-schema"],
)
def test_an_unusable_database_stops_the_server_with_a_message(
    tmp_path: Any, flags: list[str], message: str
) -> None:
    command = [sys.executable, "-m", "recall_service", "--port", "0", "--metrics-port", "0"]
    done = subprocess.run(
        [*command, "--data-dir", str(tmp_path), *flags],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    first = done.stderr.splitlines()[0]
    assert first == f"recall service: cannot open the PostgreSQL log store: {message}"
