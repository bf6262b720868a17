"""Access control over real gRPC: every role against every RPC, and the exact refusals.

One stream of tenant `acme` with an OWNER (olive), a WRITER (walt), a READER (rita) and a
detached former writer (dora); `sam` is an agent of the tenant that never took part; the
admin and service keys belong to the tenant; `globex` is another tenant's admin.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import grpc
import pytest

from cairn.v1 import recall_pb2 as pb
from cairn_server.auth import Role
from tests.clients import recall_client, rpc_error
from tests.servers import ServerProcess, free_port, make_key

OK = grpc.StatusCode.OK
PD = grpc.StatusCode.PERMISSION_DENIED
NF = grpc.StatusCode.NOT_FOUND
IA = grpc.StatusCode.INVALID_ARGUMENT

PRINCIPALS = ["admin", "service", "owner", "writer", "reader", "detached", "stranger", "globex"]


@dataclass
class World:
    clients: dict[str, Any]
    stream_id: str
    detached_at: int
    counter: Iterator[int]
    targets: dict[str, int] = field(default_factory=dict)

    @property
    def admin(self) -> Any:
        return self.clients["admin"]

    def size(self) -> int:
        stream = self.admin.GetStream(pb.GetStreamRequest(stream_id=self.stream_id)).stream
        return int(stream.size)

    def message(self) -> int:
        """A fresh message by walt; returns its seq."""
        reply = self.admin.Write(
            pb.WriteRequest(
                stream_id=self.stream_id,
                entry=pb.WriteEntry(source_agent_id="walt", content=f"m{next(self.counter)}"),
            )
        )
        return int(reply.record.seq)


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory, recall_backend: list[str]) -> Iterator[World]:
    data_dir = tmp_path_factory.mktemp("recall-access")
    server = ServerProcess("recall_service", data_dir, free_port(), recall_backend, {}).start()
    keys = {
        "admin": make_key(server, "acme", Role.ADMIN),
        "service": make_key(server, "acme", Role.SERVICE, "state"),
        "owner": make_key(server, "acme", Role.AGENT, "olive"),
        "writer": make_key(server, "acme", Role.AGENT, "walt"),
        "reader": make_key(server, "acme", Role.AGENT, "rita"),
        "detached": make_key(server, "acme", Role.AGENT, "dora"),
        "stranger": make_key(server, "acme", Role.AGENT, "sam"),
        "globex": make_key(server, "globex", Role.ADMIN),
    }
    with grpc.insecure_channel(server.address) as channel:
        clients = {name: recall_client(channel, key) for name, key in keys.items()}
        stream = (
            clients["owner"]
            .CreateStream(
                pb.CreateStreamRequest(stream_id="room", kind=pb.STREAM_KIND_CONVERSATION)
            )
            .stream
        )
        for agent, role in (
            ("walt", pb.PARTICIPANT_ROLE_WRITER),
            ("rita", pb.PARTICIPANT_ROLE_READER),
            ("dora", pb.PARTICIPANT_ROLE_WRITER),
        ):
            clients["owner"].Attach(
                pb.AttachRequest(stream_id=stream.id, agent_id=agent, role=role)
            )
        detached = clients["owner"].Detach(pb.DetachRequest(stream_id=stream.id, agent_id="dora"))
        world = World(clients, stream.id, int(detached.record.seq), itertools.count())
        world.message()
        yield world
    server.kill()


def _write(source: str) -> Callable[[World, Any], Any]:
    def call(w: World, client: Any) -> Any:
        return client.Write(
            pb.WriteRequest(
                stream_id=w.stream_id, entry=pb.WriteEntry(source_agent_id=source, content="hi")
            )
        )

    return call


def _write_as_other(w: World, client: Any, who: str) -> Any:
    return _write("olive" if who == "writer" else "walt")(w, client)


def _batch(w: World, client: Any, who: str) -> Any:
    source = "walt" if who in ("admin", "service", "globex") else ""
    return client.WriteBatch(
        pb.WriteBatchRequest(
            stream_id=w.stream_id,
            entries=[pb.WriteEntry(source_agent_id=source, content=f"b{i}") for i in range(3)],
        )
    )


def _attach(w: World, client: Any, who: str) -> Any:
    return client.Attach(
        pb.AttachRequest(
            stream_id=w.stream_id, agent_id=f"guest-{who}", role=pb.PARTICIPANT_ROLE_READER
        )
    )


def _detach(w: World, client: Any, who: str) -> Any:
    return client.Detach(pb.DetachRequest(stream_id=w.stream_id, agent_id=f"leaver-{who}"))


def _redact(w: World, client: Any, who: str) -> Any:
    return client.Redact(pb.RedactRequest(stream_id=w.stream_id, seq=w.targets[who], reason="r"))


def _prepare(w: World, rpc: str, who: str) -> None:
    """What a call needs to exist before it runs: someone to detach, something to redact."""
    if rpc == "Detach":
        w.admin.Attach(
            pb.AttachRequest(
                stream_id=w.stream_id, agent_id=f"leaver-{who}", role=pb.PARTICIPANT_ROLE_READER
            )
        )
    if rpc == "Redact":
        w.targets[who] = w.message()


def _reads(name: str) -> Callable[[World, Any, str], Any]:
    def call(w: World, client: Any, who: str) -> Any:
        s = w.stream_id
        request: Any = {
            "GetStream": pb.GetStreamRequest(stream_id=s),
            "ListParticipants": pb.ListParticipantsRequest(stream_id=s),
            "Read": pb.ReadRequest(stream_id=s),
            "OverlappingWrites": pb.OverlappingWritesRequest(stream_id=s, within_seconds=1),
            "VerifyStream": pb.VerifyStreamRequest(stream_id=s),
            "GetCheckpoint": pb.GetCheckpointRequest(stream_id=s),
            "GetInclusionProof": pb.GetInclusionProofRequest(stream_id=s, seq=1),
            "GetConsistencyProof": pb.GetConsistencyProofRequest(stream_id=s, from_size=1),
        }[name]
        return getattr(client, name)(request)

    return call


# Rows follow PRINCIPALS: admin, service, owner, writer, reader, detached, stranger, globex.
READ_ROW = [OK, OK, OK, OK, OK, PD, PD, NF]
MANAGE_ROW = [OK, PD, OK, PD, PD, PD, PD, NF]
MATRIX: dict[str, tuple[Callable[[World, Any, str], Any], list[grpc.StatusCode]]] = {
    "CreateStream": (
        lambda w, c, who: c.CreateStream(pb.CreateStreamRequest(kind=pb.STREAM_KIND_ARCHIVAL)),
        [OK] * 8,
    ),
    **{
        name: (_reads(name), READ_ROW)
        for name in (
            "GetStream",
            "ListParticipants",
            "Read",
            "OverlappingWrites",
            "VerifyStream",
            "GetCheckpoint",
            "GetInclusionProof",
            "GetConsistencyProof",
        )
    },
    "Attach": (_attach, MANAGE_ROW),
    "Detach": (_detach, MANAGE_ROW),
    "Redact": (_redact, MANAGE_ROW),
    "Write as itself": (lambda w, c, who: _write("")(w, c), [IA, IA, OK, OK, PD, PD, PD, IA]),
    "Write as another": (_write_as_other, [OK, OK, OK, PD, PD, PD, PD, NF]),
    "WriteBatch": (_batch, [OK, OK, OK, OK, PD, PD, PD, NF]),
    "GetPublicKey": (lambda w, c, who: c.GetPublicKey(pb.GetPublicKeyRequest()), [OK] * 8),
}


@pytest.mark.parametrize(
    ("rpc", "who"), [(rpc, who) for rpc in MATRIX for who in PRINCIPALS]
)  # fmt: skip
def test_role_against_rpc(world: World, rpc: str, who: str) -> None:
    call, row = MATRIX[rpc]
    expected = row[PRINCIPALS.index(who)]
    client = world.clients[who]
    _prepare(world, rpc, who)
    if expected is OK:
        call(world, client, who)
        return
    before = world.size()
    error = rpc_error(call, world, client, who)
    assert error.code() is expected, error.details()
    assert world.size() == before  # a refused call changes nothing


def test_list_streams_shows_an_agent_only_its_streams(world: World) -> None:
    def ids(who: str) -> list[str]:
        reply = world.clients[who].ListStreams(pb.ListStreamsRequest(page_size=1000))
        return [s.id for s in reply.streams]

    assert "room" in ids("admin")
    assert "room" in ids("service")
    for who in ("owner", "writer", "reader"):
        assert "room" in ids(who)
    for who in ("detached", "stranger", "globex"):
        assert "room" not in ids(who)


def test_refusals_name_the_principal_the_action_and_the_reason(world: World) -> None:
    s = world.stream_id
    cases = [
        (
            "reader",
            _write(""),
            f"agent 'rita' of tenant 'acme' may not write to stream '{s}': it is a READER; "
            "it needs WRITER",
        ),
        (
            "writer",
            _write("olive"),
            f"agent 'walt' of tenant 'acme' may not write as 'olive' to stream '{s}': it is a "
            "WRITER; writing as another participant needs OWNER",
        ),
        (
            "service",
            _write("mallory"),
            f"service 'state' of tenant 'acme' may not write as 'mallory' to stream '{s}': "
            "'mallory' is not a participant; it needs WRITER",
        ),
        (
            "owner",
            _write("rita"),
            f"agent 'olive' of tenant 'acme' may not write as 'rita' to stream '{s}': "
            "'rita' is a READER; it needs WRITER",
        ),
    ]
    for who, call, message in cases:
        error = rpc_error(call, world, world.clients[who])
        assert error.code() is PD
        assert error.details() == message


def test_detached_agent_can_neither_read_nor_write(world: World) -> None:
    dora = world.clients["detached"]
    read = rpc_error(dora.Read, pb.ReadRequest(stream_id=world.stream_id))
    assert read.code() is PD
    assert read.details() == (
        f"agent 'dora' of tenant 'acme' may not read stream '{world.stream_id}': it was "
        f"detached at seq {world.detached_at}"
    )
    write = rpc_error(_write(""), world, dora)
    assert write.code() is PD
    assert write.details() == (
        f"agent 'dora' of tenant 'acme' may not write to stream '{world.stream_id}': it was "
        f"detached at seq {world.detached_at}; it needs WRITER"
    )


def test_nobody_writes_as_a_detached_agent(world: World) -> None:
    error = rpc_error(_write("dora"), world, world.clients["service"])
    assert error.code() is PD
    assert error.details() == (
        f"service 'state' of tenant 'acme' may not write as 'dora' to stream "
        f"'{world.stream_id}': 'dora' was detached at seq {world.detached_at}; it needs WRITER"
    )


def test_stranger_is_told_it_is_not_a_participant(world: World) -> None:
    error = rpc_error(world.clients["stranger"].GetStream, pb.GetStreamRequest(stream_id="room"))
    assert error.code() is PD
    assert error.details() == (
        "agent 'sam' of tenant 'acme' may not read stream 'room': it is not a participant"
    )


def test_service_keys_do_not_manage_participants(world: World) -> None:
    error = rpc_error(_attach, world, world.clients["service"], "service")
    assert error.code() is PD
    assert error.details() == (
        "service 'state' of tenant 'acme' may not attach agents to stream 'room': service keys "
        "write but do not manage participants"
    )


def test_another_tenants_stream_is_not_found_exactly_like_a_missing_one(world: World) -> None:
    globex = world.clients["globex"]
    for stream_id in ("room", "no-such-stream"):
        for call, request in (
            (globex.GetStream, pb.GetStreamRequest(stream_id=stream_id)),
            (globex.Read, pb.ReadRequest(stream_id=stream_id)),
            (
                globex.Attach,
                pb.AttachRequest(stream_id=stream_id, agent_id="x", role=pb.PARTICIPANT_ROLE_OWNER),
            ),
            (globex.Redact, pb.RedactRequest(stream_id=stream_id, seq=1)),
            (globex.VerifyStream, pb.VerifyStreamRequest(stream_id=stream_id)),
        ):
            error = rpc_error(call, request)
            assert error.code() is NF
            assert error.details() == f"stream '{stream_id}' not found"


def test_written_by_is_the_authenticated_principal_and_both_names_are_kept(world: World) -> None:
    by_owner = _write("walt")(world, world.clients["owner"]).record
    assert (by_owner.source_agent_id, by_owner.written_by) == ("walt", "agent:olive")
    by_service = _write("walt")(world, world.clients["service"]).record
    assert (by_service.source_agent_id, by_service.written_by) == ("walt", "service:state")
    by_walt = _write("")(world, world.clients["writer"]).record
    assert (by_walt.source_agent_id, by_walt.written_by) == ("walt", "agent:walt")


def test_agent_keys_create_streams_they_own(world: World) -> None:
    walt = world.clients["writer"]
    created = walt.CreateStream(pb.CreateStreamRequest(kind=pb.STREAM_KIND_ARCHIVAL))
    assert created.owner_attach.subject_agent_id == "walt"
    assert created.owner_attach.role == pb.PARTICIPANT_ROLE_OWNER
    assert created.stream.size == 1
    error = rpc_error(
        walt.CreateStream,
        pb.CreateStreamRequest(kind=pb.STREAM_KIND_ARCHIVAL, owner_agent_id="olive"),
    )
    assert error.code() is PD
    assert error.details() == (
        "agent 'walt' of tenant 'acme' may not create a stream owned by 'olive': an agent key "
        "creates streams it owns itself"
    )
