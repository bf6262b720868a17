"""No search leaks a record its caller may not read: through the lexical lane, the vector
lane and the hybrid alike, on both log stores.

Tenant `acme` has a stream `room` — owner olive, writer walt, reader rita, and dora, a writer
since detached — and a stream `vault` of olive's alone; `sam` is an acme agent in neither.
Tenant `globex` has a stream named `room` too: the same id in another tenant, holding the
same words. Every record says "falcon", so every lane matches every record it may see.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import grpc
import pytest

from cairn.v1 import recall_pb2 as pb
from cairn_server.auth import Role
from tests.clients import recall_client, rpc_error
from tests.servers import ServerProcess, free_port, make_key

MODES: list[Any] = [pb.SEARCH_MODE_LEXICAL, pb.SEARCH_MODE_VECTOR, pb.SEARCH_MODE_HYBRID]
ROOM = {"acme room falcon one", "acme room falcon two"}
VAULT = {"acme vault falcon secret"}
GLOBEX = {"globex room falcon one", "globex room falcon two"}


@dataclass
class World:
    clients: dict[str, Any]
    sizes: dict[tuple[str, str], int]
    detached_at: int

    def search(self, who: str, mode: Any, *streams: str) -> set[str]:
        """The contents found, after waiting for every stream the caller names."""
        wait = {s: self.sizes[(who, s)] for s in streams if (who, s) in self.sizes}
        reply = self.clients[who].Search(
            pb.SearchRequest(
                query="falcon", stream_ids=list(streams), mode=mode, top_k=100, min_seq=wait
            )
        )
        return {h.record.content for h in reply.hits}


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory, recall_backend: list[str]) -> Iterator[World]:
    data_dir = tmp_path_factory.mktemp("search-access")
    server = ServerProcess("recall_service", data_dir, free_port(), recall_backend, {}).start()
    names = {
        "admin": ("acme", Role.ADMIN, ""),
        "service": ("acme", Role.SERVICE, "state"),
        "olive": ("acme", Role.AGENT, "olive"),
        "walt": ("acme", Role.AGENT, "walt"),
        "rita": ("acme", Role.AGENT, "rita"),
        "dora": ("acme", Role.AGENT, "dora"),
        "sam": ("acme", Role.AGENT, "sam"),
        "globex": ("globex", Role.ADMIN, ""),
    }
    keys = {name: make_key(server, *spec) for name, spec in names.items()}
    with grpc.insecure_channel(server.address) as channel:
        clients = {name: recall_client(channel, key) for name, key in keys.items()}
        olive, globex = clients["olive"], clients["globex"]
        kind = pb.STREAM_KIND_CONVERSATION
        olive.CreateStream(pb.CreateStreamRequest(stream_id="room", kind=kind))
        olive.CreateStream(pb.CreateStreamRequest(stream_id="vault", kind=kind))
        globex.CreateStream(pb.CreateStreamRequest(stream_id="room", kind=kind, owner_agent_id="g"))
        for agent, role in (
            ("walt", pb.PARTICIPANT_ROLE_WRITER),
            ("rita", pb.PARTICIPANT_ROLE_READER),
            ("dora", pb.PARTICIPANT_ROLE_WRITER),
        ):
            olive.Attach(pb.AttachRequest(stream_id="room", agent_id=agent, role=role))

        def write(client: Any, stream: str, author: str, content: str) -> int:
            entry = pb.WriteEntry(source_agent_id=author, content=content)
            return int(client.Write(pb.WriteRequest(stream_id=stream, entry=entry)).record.seq)

        write(olive, "room", "walt", "acme room falcon one")
        write(olive, "room", "dora", "acme room falcon two")
        vault_size = write(olive, "vault", "olive", "acme vault falcon secret")
        write(globex, "room", "g", "globex room falcon one")
        globex_size = write(globex, "room", "g", "globex room falcon two")
        detached = olive.Detach(pb.DetachRequest(stream_id="room", agent_id="dora")).record.seq
        sizes = {(who, "room"): int(detached) for who in ("admin", "service", "olive", "rita")}
        sizes |= {(who, "vault"): vault_size for who in ("admin", "service", "olive")}
        sizes[("globex", "room")] = globex_size
        yield World(clients, sizes, int(detached))
    server.kill()


@pytest.mark.parametrize("mode", MODES)
def test_each_caller_finds_exactly_what_it_may_read_by_default(world: World, mode: Any) -> None:
    # Wait for every stream first (an admin sees them all), then search with no streams named.
    world.search("admin", mode, "room", "vault")
    world.search("globex", mode, "room")
    expected = {
        "admin": ROOM | VAULT,
        "service": ROOM | VAULT,
        "olive": ROOM | VAULT,
        "walt": ROOM,
        "rita": ROOM,
        "dora": set(),
        "sam": set(),
        "globex": GLOBEX,
    }
    for who, contents in expected.items():
        assert world.search(who, mode) == contents, who


@pytest.mark.parametrize("mode", MODES)
def test_the_same_stream_id_in_two_tenants_never_mixes(world: World, mode: Any) -> None:
    assert world.search("globex", mode, "room") == GLOBEX
    assert world.search("admin", mode, "room") == ROOM


@pytest.mark.parametrize("mode", MODES)
def test_naming_a_stream_one_may_not_read_is_refused_exactly(world: World, mode: Any) -> None:
    cases = [
        (
            "rita",
            "vault",
            grpc.StatusCode.PERMISSION_DENIED,
            "agent 'rita' of tenant 'acme' may not read stream 'vault': it is not a participant",
        ),
        (
            "sam",
            "room",
            grpc.StatusCode.PERMISSION_DENIED,
            "agent 'sam' of tenant 'acme' may not read stream 'room': it is not a participant",
        ),
        (
            "dora",
            "room",
            grpc.StatusCode.PERMISSION_DENIED,
            f"agent 'dora' of tenant 'acme' may not read stream 'room': it was detached at seq "
            f"{world.detached_at}",
        ),
        ("globex", "vault", grpc.StatusCode.NOT_FOUND, "stream 'vault' not found"),
    ]
    for who, stream, code, details in cases:
        request = pb.SearchRequest(query="falcon", stream_ids=[stream], mode=mode)
        error = rpc_error(world.clients[who].Search, request)
        assert (error.code(), error.details()) == (code, details)
    # One unreadable stream among readable ones refuses the whole search; of several, the
    # first named decides.
    for streams, code, details in (
        (
            ["room", "vault"],
            grpc.StatusCode.PERMISSION_DENIED,
            "agent 'walt' of tenant 'acme' may not read stream 'vault': it is not a participant",
        ),
        (["room", "nosuch", "vault"], grpc.StatusCode.NOT_FOUND, "stream 'nosuch' not found"),
        (
            ["vault", "nosuch"],
            grpc.StatusCode.PERMISSION_DENIED,
            "agent 'walt' of tenant 'acme' may not read stream 'vault': it is not a participant",
        ),
    ):
        request = pb.SearchRequest(query="falcon", stream_ids=streams, mode=mode)
        error = rpc_error(world.clients["walt"].Search, request)
        assert (error.code(), error.details()) == (code, details)
    assert world.search("walt", mode, "room", "room") == ROOM
