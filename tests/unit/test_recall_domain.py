"""Domain behaviours of the recall service, without gRPC: limits, normal forms, time, replay,
group commit and appends from many threads."""

from __future__ import annotations

import argparse
import asyncio
import os
import stat
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from cairn_server.auth import Principal, Role
from cairn_server.errors import InvalidArgument
from cairn_server.runner import Runner
from recall_service import participants, reads, streams, writes
from recall_service.core import Deps
from recall_service.models import Appended, Record, RecordKind, StreamKind
from recall_service.models import Role as ParticipantRole
from recall_service.server import RECALL_ENV, add_flags, settings_from_args
from recall_service.signing import KEY_FILE, load_or_create
from recall_service.store.base import RecordQuery
from recall_service.store.sqlite import SqliteLogStore
from recall_service.verification import verify_stream

ADMIN = Principal("acme", "root", Role.ADMIN)
ALICE = Principal("acme", "alice", Role.AGENT)


@pytest.fixture
def deps(tmp_path: Path) -> Iterator[Deps]:
    store = SqliteLogStore(tmp_path)
    yield Deps(store=store, signer=load_or_create(tmp_path))
    store.close()


def conversation(deps: Deps) -> str:
    stream, _, _ = streams.create_stream(deps, ALICE, "", StreamKind.CONVERSATION, "")
    return stream.id


def write(deps: Deps, stream_id: str, entry: writes.Entry) -> Record:
    return writes.write(deps, ALICE, stream_id, [entry], batch=False).records[0]


def test_content_limit_is_the_configured_one(deps: Deps) -> None:
    deps.max_content_bytes = 10
    stream_id = conversation(deps)
    assert write(deps, stream_id, writes.Entry("0123456789")).seq == 2
    with pytest.raises(InvalidArgument) as caught:
        write(deps, stream_id, writes.Entry("0123456789a"))
    assert caught.value.message == "entry.content: is 11 bytes of UTF-8, over the limit of 10 bytes"


def test_max_content_bytes_comes_from_the_flag_or_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    parser = argparse.ArgumentParser()
    add_flags(parser)
    assert settings_from_args(parser.parse_args([])).max_content_bytes == 65536
    assert settings_from_args(parser.parse_args([])).port == 50052
    monkeypatch.setenv(RECALL_ENV["max_content_bytes"], "1000")
    assert settings_from_args(parser.parse_args([])).max_content_bytes == 1000
    flagged = parser.parse_args(["--max-content-bytes", "2000"])
    assert settings_from_args(flagged).max_content_bytes == 2000


def test_metadata_is_stored_in_canonical_form_and_tags_lose_duplicates(deps: Deps) -> None:
    stream_id = conversation(deps)
    record = write(
        deps,
        stream_id,
        writes.Entry("hi", tags=("b", "a", "b"), metadata_json='{ "z": 1, "a": {"é": [1, 2.5]} }'),
    )
    assert record.metadata_json == '{"a":{"é":[1,2.5]},"z":1}'
    assert record.tags == ("b", "a")
    assert write(deps, stream_id, writes.Entry("hi", metadata_json="  ")).metadata_json == "{}"


def test_times_never_go_backwards_along_a_stream(deps: Deps) -> None:
    stream_id = conversation(deps)
    future = 4_000_000_000_000_000  # µs, in the year 2096
    times = iter([future, 1_000, future + 5])
    deps.clock = lambda: next(times)
    stamps = [write(deps, stream_id, writes.Entry(f"m{i}")).created_at for i in range(3)]
    assert stamps == [future, future, future + 5]


def test_membership_replays_from_attach_and_detach_records(deps: Deps) -> None:
    stream_id = conversation(deps)
    participants.attach(deps, ALICE, stream_id, "bob", ParticipantRole.READER)
    participants.attach(deps, ALICE, stream_id, "bob", ParticipantRole.WRITER)
    participants.detach(deps, ADMIN, stream_id, "bob")
    participants.attach(deps, ADMIN, stream_id, "bob", ParticipantRole.READER)
    stream = deps.store.reader().get_stream("acme", stream_id)
    assert stream is not None
    events = deps.store.reader().membership_events(stream, stream.size)
    assert [(e.seq, e.kind, e.source_agent_id, e.written_by) for e in events] == [
        (1, RecordKind.ATTACH, "alice", "agent:alice"),
        (2, RecordKind.ATTACH, "alice", "agent:alice"),
        (3, RecordKind.ATTACH, "alice", "agent:alice"),
        (4, RecordKind.DETACH, "", "admin:root"),
        (5, RecordKind.ATTACH, "", "admin:root"),
    ]
    at = {
        seq: [(p.agent_id, p.role.name, joined) for joined, p in participants.replay(events[:seq])]
        for seq in (2, 3, 4, 5)
    }
    assert at[2] == [("alice", "OWNER", 1), ("bob", "READER", 2)]
    assert at[3] == [("alice", "OWNER", 1), ("bob", "WRITER", 2)]
    assert at[4] == [("alice", "OWNER", 1)]
    assert at[5] == [("alice", "OWNER", 1), ("bob", "READER", 5)]


def test_signing_key_is_private_and_loaded_not_replaced(tmp_path: Path) -> None:
    first = load_or_create(tmp_path)
    assert stat.S_IMODE(os.stat(tmp_path / KEY_FILE).st_mode) == 0o600
    assert load_or_create(tmp_path).public_key == first.public_key
    assert [p.name for p in tmp_path.iterdir()] == [KEY_FILE]


def test_group_commit_rolls_back_only_the_unit_that_failed(deps: Deps) -> None:
    stream_id = conversation(deps)
    runner = Runner(inline_reads=True, batch=deps.store.group)

    async def burst() -> list[object]:
        calls = [
            runner.write(writes.write, deps, ALICE, stream_id, [writes.Entry(c)], batch=False)
            for c in ("one", "", "two", "three")
        ]
        return await asyncio.gather(*calls, return_exceptions=True)

    try:
        outcomes = asyncio.run(burst())
    finally:
        runner.close()
    assert isinstance(outcomes[1], InvalidArgument)
    seqs = [o.records[0].seq for o in outcomes if isinstance(o, Appended)]
    assert seqs == [2, 3, 4]
    rows, _ = reads.read(deps, ALICE, stream_id, RecordQuery(), page_size=10, page_token="")
    assert [r.content for r in rows] == ["one", "two", "three"]
    assert verify_stream(deps, ALICE, stream_id, None).ok is True


def test_appends_from_many_threads_are_serialized_without_gaps(deps: Deps) -> None:
    stream_id = conversation(deps)
    other_id = conversation(deps)
    errors: list[BaseException] = []

    def writer(i: int) -> None:
        try:
            for j in range(50):
                target = stream_id if j % 2 else other_id
                write(deps, target, writes.Entry(f"{i}:{j}"))
        except BaseException as error:  # surfaced below
            errors.append(error)

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    for target in (stream_id, other_id):
        rows, _ = reads.read(
            deps, ALICE, target, RecordQuery(include_events=True), page_size=1000, page_token=""
        )
        assert [r.seq for r in rows] == list(range(1, 202))
        assert verify_stream(deps, ALICE, target, None).ok is True
