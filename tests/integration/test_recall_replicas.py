"""Two recall processes on one PostgreSQL schema: writers spread across both append to one
stream, and the result is one gap-free chain with one Merkle tree and checkpoints either
process verifies; killing one of them mid-stream loses no acknowledged record.

The replicas share nothing but the database and the signing key file (one data directory,
as a fleet mounts one key).
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import psycopg
import pytest

from cairn import verify
from cairn.v1 import recall_pb2 as pb
from cairn_server.auth import Role
from tests.clients import recall_client
from tests.servers import ServerProcess, free_port, make_key

WRITERS = 4
PER_WRITER = 100


@dataclass
class Fleet:
    """Two replicas, a channel to each, and an admin client per replica."""

    servers: list[ServerProcess]
    channels: list[grpc.Channel]
    admins: list[Any] = field(default_factory=list)

    def client(self, replica: int, key: str) -> Any:
        return recall_client(self.channels[replica], key)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory, postgres_url: str) -> Iterator[Fleet]:
    schema = f"f_{uuid.uuid4().hex[:12]}"
    flags = ["--database-url", postgres_url, "--database-schema", schema]
    data_dir: Path = tmp_path_factory.mktemp("fleet")
    servers = [
        ServerProcess("recall_service", data_dir, free_port(), flags, {}).start() for _ in range(2)
    ]
    channels = [grpc.insecure_channel(server.address) for server in servers]
    key = make_key(servers[0], "acme")
    fleet = Fleet(servers, channels)
    fleet.admins = [fleet.client(i, key) for i in range(2)]
    yield fleet
    for channel in fleet.channels:
        channel.close()
    for server in servers:
        server.kill()
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'.encode())


def writers_stream(fleet: Fleet) -> tuple[str, bytes, list[list[Any]]]:
    """A stream created through replica 0 with WRITERS agents attached through replica 1;
    `clients[i][r]` is writer i's client on replica r (writer i writes through i % 2)."""
    created = fleet.admins[0].CreateStream(pb.CreateStreamRequest(kind=pb.STREAM_KIND_CONVERSATION))
    stream_id = created.stream.id
    clients = []
    for i in range(WRITERS):
        fleet.admins[1].Attach(
            pb.AttachRequest(stream_id=stream_id, agent_id=f"w{i}", role=pb.PARTICIPANT_ROLE_WRITER)
        )
        key = make_key(fleet.servers[i % 2], "acme", Role.AGENT, f"w{i}")
        clients.append([fleet.client(r, key) for r in range(2)])
    return stream_id, created.stream.genesis, clients


def read_all(client: Any, stream_id: str) -> list[pb.Record]:
    records: list[pb.Record] = []
    token = ""
    while True:
        reply = client.Read(
            pb.ReadRequest(
                stream_id=stream_id, include_events=True, page_size=1000, page_token=token
            )
        )
        records.extend(reply.records)
        token = reply.next_page_token
        if not token:
            return records


def run_writers(count: int, write: Callable[[int], None]) -> None:
    threads = [threading.Thread(target=write, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)


def test_writers_on_two_replicas_append_one_gap_free_verifiable_chain(fleet: Fleet) -> None:
    stream_id, genesis, clients = writers_stream(fleet)
    acknowledged: list[list[pb.WriteResponse]] = [[] for _ in clients]
    replays: list[tuple[pb.WriteResponse, pb.WriteResponse]] = []
    errors: list[BaseException] = []

    def write(i: int) -> None:
        try:
            for j in range(PER_WRITER):
                request = pb.WriteRequest(
                    stream_id=stream_id,
                    entry=pb.WriteEntry(content=f"{i}:{j}", idempotency_key=f"{i}-{j}"),
                )
                acknowledged[i].append(clients[i][i % 2].Write(request))
                if j % 25 == 24:  # the same write retried through the other replica
                    replays.append((acknowledged[i][-1], clients[i][1 - i % 2].Write(request)))
        except BaseException as error:  # surfaced below
            errors.append(error)

    run_writers(WRITERS, write)
    assert errors == []

    total = WRITERS + WRITERS * PER_WRITER
    through = [read_all(admin, stream_id) for admin in fleet.admins]
    assert through[0] == through[1]
    records = through[0]
    assert [r.seq for r in records] == list(range(1, total + 1))
    for i in range(WRITERS):
        mine = [
            r for r in records if r.source_agent_id == f"w{i}" and r.kind == pb.RECORD_KIND_MESSAGE
        ]
        assert [r.content for r in mine] == [f"{i}:{j}" for j in range(PER_WRITER)]
        assert [r.seq for r in mine] == [a.record.seq for a in acknowledged[i]]
    assert len(replays) == WRITERS * PER_WRITER // 25
    for first, again in replays:
        assert (again.record, again.replayed, first.replayed) == (first.record, True, False)

    keys = [admin.GetPublicKey(pb.GetPublicKeyRequest()) for admin in fleet.admins]
    assert keys[0] == keys[1]
    heads = [
        admin.GetStream(pb.GetStreamRequest(stream_id=stream_id)).stream for admin in fleet.admins
    ]
    assert verify.verify_records(records, genesis) == heads[0].chain_head == heads[1].chain_head
    # Every receipt verifies against the one log, whichever replica signed it.
    for replica in range(2):
        receipts = [a.checkpoint for i in range(replica, WRITERS, 2) for a in acknowledged[i]]
        latest = max(receipts, key=lambda cp: cp.size)
        verify.verify_log(records, genesis, latest, keys[0].public_key)
        verdict = fleet.admins[1 - replica].VerifyStream(
            pb.VerifyStreamRequest(stream_id=stream_id, trusted_checkpoint=latest)
        )
        assert (verdict.ok, verdict.size, verdict.reason) == (True, total, "")
        proof = fleet.admins[replica].GetConsistencyProof(
            pb.GetConsistencyProofRequest(stream_id=stream_id, from_size=latest.size)
        )
        assert (proof.from_size, proof.to_size) == (latest.size, total)
        verify.verify_consistency(latest.size, total, list(proof.proof), latest.root, heads[0].root)


def test_killing_a_replica_mid_stream_loses_no_acknowledged_record(fleet: Fleet) -> None:
    stream_id, genesis, clients = writers_stream(fleet)
    acknowledged: dict[int, str] = {}
    after_kill: list[int] = []
    checkpoints: list[pb.Checkpoint] = []
    unexpected: list[BaseException] = []
    killed = threading.Event()
    stop = threading.Event()
    lock = threading.Lock()

    def keep_writing(i: int) -> None:
        replica = i % 2
        j = 0
        while not stop.is_set():
            content = f"{i}:{j}"
            try:
                reply = clients[i][replica].Write(
                    pb.WriteRequest(stream_id=stream_id, entry=pb.WriteEntry(content=content))
                )
            except grpc.RpcError as error:
                # Only the killed replica's callers may fail, and only as UNAVAILABLE.
                if replica != 0 or error.code() is not grpc.StatusCode.UNAVAILABLE:
                    unexpected.append(error)
                return
            except BaseException as error:  # surfaced below
                unexpected.append(error)
                return
            with lock:
                acknowledged[reply.record.seq] = content
                checkpoints.append(reply.checkpoint)
                if killed.is_set():
                    after_kill.append(reply.record.seq)
            j += 1

    writers = threading.Thread(target=run_writers, args=(WRITERS, keep_writing))
    writers.start()
    time.sleep(1.0)
    killed.set()
    fleet.servers[0].kill()  # SIGKILL, perhaps holding the stream's row lock mid-append
    time.sleep(0.7)
    stop.set()
    writers.join(60)
    assert unexpected == []
    assert len(acknowledged) > 100
    # The surviving replica kept appending after the other died, mid-transaction or not.
    assert len(after_kill) > 10

    records = read_all(fleet.admins[1], stream_id)
    assert [r.seq for r in records] == list(range(1, len(records) + 1))
    by_seq = {r.seq: r.content for r in records}
    assert {seq: c for seq, c in acknowledged.items() if by_seq.get(seq) != c} == {}
    stream = fleet.admins[1].GetStream(pb.GetStreamRequest(stream_id=stream_id)).stream
    assert verify.verify_records(records, genesis) == stream.chain_head
    latest = max(checkpoints, key=lambda cp: cp.size)
    public_key = fleet.admins[1].GetPublicKey(pb.GetPublicKeyRequest()).public_key
    verify.verify_log(records, genesis, latest, public_key)
    verdict = fleet.admins[1].VerifyStream(
        pb.VerifyStreamRequest(stream_id=stream_id, trusted_checkpoint=latest)
    )
    assert (verdict.ok, verdict.size, verdict.reason) == (True, len(records), "")

    # The restarted replica serves the same log and appends where it ends.
    fleet.servers[0].start()
    again = read_all(fleet.admins[0], stream_id)
    assert again == records
    reply = clients[0][0].Write(
        pb.WriteRequest(stream_id=stream_id, entry=pb.WriteEntry(content="back"))
    )
    assert reply.record.seq == len(records) + 1
