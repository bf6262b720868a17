"""Concurrent writers and a killed server: seqs stay gap-free, acknowledged records stay put,
and the chain stays valid."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import grpc

from cairn import verify
from cairn.v1 import recall_pb2 as pb
from cairn_server.auth import Role
from tests.clients import recall_client
from tests.servers import ServerProcess, make_key

WRITERS = 8
PER_WRITER = 500
# PostgreSQL serializes a stream's appends through each commit's fsync (~4 ms apiece here,
# where SQLite's group commit shares one): fewer records keep the suite fast, and
# test_recall_replicas.py adds two processes on one stream.
PER_WRITER_POSTGRES = 50


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


def writers_stream(server: ServerProcess, channel: grpc.Channel) -> tuple[Any, str, list[Any]]:
    """A stream with WRITERS agents attached (seqs 1..WRITERS), and a client per agent."""
    admin = recall_client(channel, make_key(server, "acme"))
    stream = admin.CreateStream(pb.CreateStreamRequest(kind=pb.STREAM_KIND_CONVERSATION)).stream
    clients = []
    for i in range(WRITERS):
        admin.Attach(
            pb.AttachRequest(stream_id=stream.id, agent_id=f"w{i}", role=pb.PARTICIPANT_ROLE_WRITER)
        )
        key = make_key(server, "acme", Role.AGENT, f"w{i}")
        clients.append(recall_client(channel, key))
    return admin, stream.id, clients


def test_eight_concurrent_writers_get_gap_free_seqs_and_a_valid_chain(
    server_factory: Callable[..., ServerProcess], recall_backend: list[str]
) -> None:
    server = server_factory("recall_service", *recall_backend)
    per_writer = PER_WRITER_POSTGRES if recall_backend else PER_WRITER
    with grpc.insecure_channel(server.address) as channel:
        admin, stream_id, clients = writers_stream(server, channel)

        def write_all(i: int) -> list[int]:
            return [
                int(
                    clients[i]
                    .Write(
                        pb.WriteRequest(
                            stream_id=stream_id, entry=pb.WriteEntry(content=f"{i}:{j}")
                        )
                    )
                    .record.seq
                )
                for j in range(per_writer)
            ]

        with ThreadPoolExecutor(WRITERS) as pool:
            acknowledged = list(pool.map(write_all, range(WRITERS)))

        records = read_all(admin, stream_id)
        total = WRITERS + WRITERS * per_writer
        assert [r.seq for r in records] == list(range(1, total + 1))
        messages = [r for r in records if r.kind == pb.RECORD_KIND_MESSAGE]
        assert [r.seq for r in messages] == list(range(WRITERS + 1, total + 1))
        assert sorted(seq for seqs in acknowledged for seq in seqs) == [r.seq for r in messages]
        for i in range(WRITERS):
            mine = [r for r in messages if r.source_agent_id == f"w{i}"]
            assert [r.content for r in mine] == [f"{i}:{j}" for j in range(per_writer)]
            assert [r.seq for r in mine] == acknowledged[i]
        stream = admin.GetStream(pb.GetStreamRequest(stream_id=stream_id)).stream
        assert verify.verify_records(records, stream.genesis) == stream.chain_head
        verdict = admin.VerifyStream(pb.VerifyStreamRequest(stream_id=stream_id))
        assert (verdict.ok, verdict.size, verdict.reason) == (True, total, "")


def test_acknowledged_writes_survive_sigkill_mid_stream(
    server_factory: Callable[..., ServerProcess], recall_backend: list[str]
) -> None:
    server = server_factory("recall_service", *recall_backend)
    acknowledged: dict[int, str] = {}
    checkpoints: list[pb.Checkpoint] = []
    unexpected: list[grpc.RpcError] = []
    lock = threading.Lock()
    with grpc.insecure_channel(server.address) as channel:
        admin, stream_id, clients = writers_stream(server, channel)

        def keep_writing(i: int) -> None:
            for j in range(100_000):
                content = f"{i}:{j}"
                try:
                    if j % 5 == 4:  # every fifth call is a batch of three
                        reply = clients[i].WriteBatch(
                            pb.WriteBatchRequest(
                                stream_id=stream_id,
                                entries=[pb.WriteEntry(content=f"{content}.{k}") for k in range(3)],
                            )
                        )
                        written = [(r.seq, r.content) for r in reply.records]
                    else:
                        reply = clients[i].Write(
                            pb.WriteRequest(
                                stream_id=stream_id, entry=pb.WriteEntry(content=content)
                            )
                        )
                        written = [(reply.record.seq, reply.record.content)]
                except grpc.RpcError as error:
                    if error.code() is not grpc.StatusCode.UNAVAILABLE:
                        unexpected.append(error)
                    return
                with lock:
                    acknowledged.update(written)
                    checkpoints.append(reply.checkpoint)

        threads = [threading.Thread(target=keep_writing, args=(i,)) for i in range(4)]
        for thread in threads:
            thread.start()
        time.sleep(1.5)
        server.kill()  # SIGKILL: no shutdown code runs
        for thread in threads:
            thread.join(30)
    assert unexpected == []
    assert len(acknowledged) > 100

    server.start()
    with grpc.insecure_channel(server.address) as channel:
        admin = recall_client(channel, make_key(server, "acme"))
        records = read_all(admin, stream_id)
        by_seq = {r.seq: r.content for r in records}
        assert [r.seq for r in records] == list(range(1, len(records) + 1))
        missing = {seq: c for seq, c in acknowledged.items() if by_seq.get(seq) != c}
        assert missing == {}
        stream = admin.GetStream(pb.GetStreamRequest(stream_id=stream_id)).stream
        assert verify.verify_records(records, stream.genesis) == stream.chain_head
        public_key = admin.GetPublicKey(pb.GetPublicKeyRequest()).public_key
        latest = max(checkpoints, key=lambda cp: cp.size)
        verify.verify_log(records, stream.genesis, latest, public_key)
        verdict = admin.VerifyStream(
            pb.VerifyStreamRequest(stream_id=stream_id, trusted_checkpoint=latest)
        )
        assert (verdict.ok, verdict.reason) == (True, "")
        # It keeps taking writes where it left off.
        after = clients_after(server, channel, stream_id)
        assert after == len(records) + 1


def clients_after(server: ServerProcess, channel: grpc.Channel, stream_id: str) -> int:
    client = recall_client(channel, make_key(server, "acme", Role.AGENT, "w0"))
    reply = client.Write(pb.WriteRequest(stream_id=stream_id, entry=pb.WriteEntry(content="back")))
    return int(reply.record.seq)
