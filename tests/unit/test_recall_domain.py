"""Domain behaviours of the recall service, without gRPC: limits, normal forms, time, replay,
group commit, appends from many threads and from two stores on one database, concurrent
creates and retries, verification while others append, and what is reported once durable.
Every store-backed test runs on SQLite and on PostgreSQL."""

from __future__ import annotations

import argparse
import asyncio
import os
import stat
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest

from cairn_server.auth import Principal, Role
from cairn_server.errors import AlreadyExists, InvalidArgument
from cairn_server.runner import Runner
from recall_service import merkle, participants, reads, redaction, streams, writes
from recall_service.core import Deps
from recall_service.models import Appended, Record, RecordKind, StreamKind
from recall_service.models import Role as ParticipantRole
from recall_service.server import RECALL_ENV, add_flags, settings_from_args
from recall_service.signing import KEY_FILE, load_or_create
from recall_service.store import sql_reader
from recall_service.store.base import LogStore, RecordQuery
from recall_service.store.postgres import PostgresRecallStore
from recall_service.store.sqlite import SqliteLogStore
from recall_service.verification import verify_stream

ADMIN = Principal("acme", "root", Role.ADMIN)
ALICE = Principal("acme", "alice", Role.AGENT)


Opener = Callable[..., LogStore]


@pytest.fixture(params=["sqlite", "postgres"])
def open_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Opener]:
    """Opens stores on one database (each call a new store, as another process would)."""
    opened: list[LogStore] = []

    def open_one(on_append: Callable[[Sequence[Record]], None] | None = None) -> LogStore:
        store: LogStore
        if request.param == "sqlite":
            store = SqliteLogStore(tmp_path, on_append=on_append)
        else:
            url = request.getfixturevalue("postgres_url")
            schema = request.getfixturevalue("postgres_schema")
            store = PostgresRecallStore(url, schema, pool_size=8, on_append=on_append)
        opened.append(store)
        return store

    yield open_one
    for store in opened:
        store.close()


@pytest.fixture
def deps(open_store: Opener, tmp_path: Path) -> Deps:
    return Deps(store=open_store(), signer=load_or_create(tmp_path))


def runner_for(store: LogStore) -> Runner:
    """The runner the server would use with this store."""
    if isinstance(store, PostgresRecallStore):
        return Runner(inline_reads=False, write_threads=8, retry_on=store.retryable)
    assert isinstance(store, SqliteLogStore)
    return Runner(inline_reads=True, batch=store.group)


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


def test_store_and_metrics_settings_come_from_the_flags_or_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    parser = argparse.ArgumentParser()
    add_flags(parser)
    defaults = settings_from_args(parser.parse_args([]))
    assert (defaults.database_url, defaults.database_schema, defaults.metrics_port) == (
        "",
        "public",
        9052,
    )
    monkeypatch.setenv("CAIRN_DATABASE_URL", "postgresql://db/cairn")
    monkeypatch.setenv("CAIRN_DATABASE_SCHEMA", "fleet")
    monkeypatch.setenv("CAIRN_RECALL_METRICS_PORT", "9100")
    from_env = settings_from_args(parser.parse_args([]))
    assert (from_env.database_url, from_env.database_schema, from_env.metrics_port) == (
        "postgresql://db/cairn",
        "fleet",
        9100,
    )
    flags = ["--database-url", "postgresql://other/x", "--database-schema", "s2"]
    flagged = settings_from_args(parser.parse_args([*flags, "--metrics-port", "0"]))
    assert (flagged.database_url, flagged.database_schema, flagged.metrics_port) == (
        "postgresql://other/x",
        "s2",
        0,
    )


def test_nul_characters_are_refused_by_both_stores_alike(deps: Deps) -> None:
    stream_id = conversation(deps)
    with pytest.raises(InvalidArgument) as caught:
        write(deps, stream_id, writes.Entry("a\x00b"))
    assert caught.value.message == "entry.content: must not contain NUL characters (U+0000)"
    seq = write(deps, stream_id, writes.Entry("fine")).seq
    with pytest.raises(InvalidArgument) as refused:
        redaction.redact(deps, ALICE, stream_id, seq, "why\x00")
    assert refused.value.message == "reason: must not contain NUL characters (U+0000)"
    assert verify_stream(deps, ALICE, stream_id, None).size == 2


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


def test_concurrent_writes_roll_back_only_the_unit_that_failed(deps: Deps) -> None:
    stream_id = conversation(deps)
    runner = runner_for(deps.store)

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
    # SQLite runs the group in queue order; PostgreSQL's threads race for the stream's lock.
    acknowledged = {
        o.records[0].content: o.records[0].seq for o in outcomes if isinstance(o, Appended)
    }
    assert sorted(acknowledged.values()) == [2, 3, 4]
    rows, _ = reads.read(deps, ALICE, stream_id, RecordQuery(), page_size=10, page_token="")
    assert {r.content: r.seq for r in rows} == acknowledged
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


def run_together(*jobs: Callable[[], object]) -> list[object]:
    """Runs the jobs on threads started together; their results, or the errors they raised."""
    barrier = threading.Barrier(len(jobs))
    outcomes: list[object] = [None] * len(jobs)

    def run(i: int) -> None:
        barrier.wait()
        try:
            outcomes[i] = jobs[i]()
        except BaseException as error:  # returned to the test
            outcomes[i] = error

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(jobs))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return outcomes


def test_appends_through_two_stores_on_one_database_form_one_verifiable_log(
    open_store: Opener, tmp_path: Path
) -> None:
    # Two stores stand for two replicas: nothing is shared between them but the database.
    signer = load_or_create(tmp_path)
    one, two = Deps(store=open_store(), signer=signer), Deps(store=open_store(), signer=signer)
    stream_id = conversation(one)
    participants.attach(one, ALICE, stream_id, "bob", ParticipantRole.WRITER)
    secret = write(two, stream_id, writes.Entry("the code is 8471")).seq

    def writer(deps: Deps, i: int) -> list[int]:
        return [write(deps, stream_id, writes.Entry(f"{i}:{j}")).seq for j in range(40)]

    def manager() -> list[int]:
        # Attach, redact and detach on the other store while the writers append.
        seqs = [participants.attach(two, ADMIN, stream_id, "carol", ParticipantRole.READER)[1]]
        seqs.append(redaction.redact(one, ALICE, stream_id, secret, "by mistake")[0])
        seqs.append(participants.detach(two, ADMIN, stream_id, "carol")[0])
        return [r.seq for r in seqs if r is not None]

    outcomes = run_together(*(lambda i=i: writer((one, two)[i % 2], i) for i in range(4)), manager)
    seqs = [o for o in outcomes if isinstance(o, list)]
    assert len(seqs) == 5, outcomes
    size = 3 + 4 * 40 + 3
    for deps in (one, two):
        rows, _ = reads.read(
            deps, ALICE, stream_id, RecordQuery(include_events=True), page_size=1000, page_token=""
        )
        assert [r.seq for r in rows] == list(range(1, size + 1))
        for i in range(4):
            mine = [r for r in rows if (r.content or "").startswith(f"{i}:")]
            assert [r.content for r in mine] == [f"{i}:{j}" for j in range(40)]
            assert [r.seq for r in mine] == seqs[i]
        kinds = [r.kind for r in rows if r.seq in seqs[4]]
        assert kinds == [RecordKind.ATTACH, RecordKind.REDACTION, RecordKind.DETACH]
        erased = rows[secret - 1]
        assert (erased.content, erased.salt, erased.redacted_by) == (None, None, seqs[4][1])
        verdict = verify_stream(deps, ALICE, stream_id, None)
        assert (verdict.ok, verdict.size, verdict.reason) == (True, size, "")


def test_streams_read_together_show_every_append_of_another_store(
    open_store: Opener, tmp_path: Path
) -> None:
    # The reader keeps the streams it read and reads only key and size again (`get_streams`):
    # what another replica appends must show, what it rolls back must not.
    signer = load_or_create(tmp_path)
    one, two = Deps(store=open_store(), signer=signer), Deps(store=open_store(), signer=signer)
    ids = [conversation(one) for _ in range(3)]
    reader = two.store.reader()
    first = reader.get_streams("acme", ids)
    assert [first[i].size for i in ids] == [1, 1, 1]
    write(one, ids[0], writes.Entry("grown"))
    with pytest.raises(InvalidArgument):
        write(one, ids[1], writes.Entry(""))
    second = reader.get_streams("acme", [*ids, "stream-missing"])
    assert sorted(second) == sorted(ids)
    fresh = one.store.reader().get_stream("acme", ids[0])
    assert fresh is not None and fresh.size == 2
    assert second[ids[0]] == fresh
    assert second[ids[1]] is first[ids[1]] and second[ids[2]] is first[ids[2]]
    assert reader.get_streams("other-tenant", ids) == {}


def test_records_across_streams_are_read_in_one_query_by_stream_key_and_seq(
    deps: Deps,
) -> None:
    ids = [conversation(deps) for _ in range(3)]
    seqs = [[write(deps, i, writes.Entry(f"{i[-4:]} {n}")).seq for n in range(3)] for i in ids]
    erased = redaction.redact(deps, ALICE, ids[1], seqs[1][0], "by mistake")[0]
    reader = deps.store.reader()
    found = reader.get_streams("acme", ids)
    streams = [found[i] for i in ids]
    wanted = [(streams[0], seqs[0][2]), (streams[1], seqs[1][0]), (streams[2], 1)]
    wanted += [(streams[0], seqs[0][2]), (streams[2], 99)]  # a repeat, and a seq past the end
    got = reader.records_across(wanted)
    assert sorted(got) == sorted([(s.key, seq) for s, seq in wanted[:3]])
    assert got[(streams[0].key, seqs[0][2])].content == f"{ids[0][-4:]} 2"
    assert got[(streams[0].key, seqs[0][2])].stream_id == ids[0]
    gone = got[(streams[1].key, seqs[1][0])]
    assert (gone.content, gone.salt, gone.redacted_by) == (None, None, erased.seq)
    assert got[(streams[2].key, 1)].kind is RecordKind.ATTACH  # the creator joins first
    assert reader.records_across([]) == {}


def test_concurrent_creates_of_one_stream_id_make_one_stream(
    open_store: Opener, tmp_path: Path
) -> None:
    signer = load_or_create(tmp_path)
    stores = [Deps(store=open_store(), signer=signer) for _ in range(2)]

    def create(deps: Deps) -> str:
        return streams.create_stream(deps, ALICE, "shared", StreamKind.CONVERSATION, "")[0].id

    outcomes = run_together(*(lambda i=i: create(stores[i % 2]) for i in range(4)))
    assert outcomes.count("shared") == 1
    refusals = [o for o in outcomes if isinstance(o, AlreadyExists)]
    assert [e.message for e in refusals] == ["stream 'shared' already exists"] * 3
    listed = streams.list_streams(stores[1], ADMIN, page_size=10, page_token="", kind=None)
    assert [s.id for s in listed[0]] == ["shared"]
    assert verify_stream(stores[0], ALICE, "shared", None).size == 1


def test_concurrent_retries_with_one_idempotency_key_write_one_record(
    open_store: Opener, tmp_path: Path
) -> None:
    signer = load_or_create(tmp_path)
    stores = [Deps(store=open_store(), signer=signer) for _ in range(2)]
    stream_id = conversation(stores[0])
    entry = writes.Entry("once only", idempotency_key="k-1")

    def retry(deps: Deps) -> Appended:
        return writes.write(deps, ALICE, stream_id, [entry], batch=False)

    outcomes = run_together(*(lambda i=i: retry(stores[i % 2]) for i in range(6)))
    appended = [o for o in outcomes if isinstance(o, Appended)]
    assert len(appended) == 6
    assert {a.records[0].seq for a in appended} == {2}
    assert sorted(a.replayed[0] for a in appended) == [False] + [True] * 5
    assert verify_stream(stores[1], ALICE, stream_id, None).size == 2


def test_verification_sees_one_state_while_others_append(deps: Deps) -> None:
    stream_id = conversation(deps)
    done = threading.Event()

    def keep_writing() -> int:
        n = 0
        while not done.is_set():
            write(deps, stream_id, writes.Entry(f"m{n}"))
            n += 1
        return n

    def keep_verifying() -> list[tuple[bool, str]]:
        try:
            return [
                (v.ok, v.reason)
                for v in (verify_stream(deps, ALICE, stream_id, None) for _ in range(40))
            ]
        finally:
            done.set()

    written, verdicts = run_together(keep_writing, keep_verifying)
    assert isinstance(written, int) and written > 0, written
    assert verdicts == [(True, "")] * 40


def test_only_durable_appends_are_reported_by_kind(open_store: Opener, tmp_path: Path) -> None:
    reported: list[list[RecordKind]] = []
    store = open_store(lambda records: reported.append([r.kind for r in records]))
    deps = Deps(store=store, signer=load_or_create(tmp_path))
    stream_id = conversation(deps)
    participants.attach(deps, ALICE, stream_id, "bob", ParticipantRole.WRITER)
    writes.write(deps, ALICE, stream_id, [writes.Entry("a"), writes.Entry("b")], batch=True)
    with pytest.raises(InvalidArgument):
        writes.write(deps, ALICE, stream_id, [writes.Entry("c"), writes.Entry("")], batch=True)
    redaction.redact(deps, ALICE, stream_id, 3, "no")
    participants.detach(deps, ALICE, stream_id, "bob")
    writes.write(deps, ALICE, stream_id, [writes.Entry("a", idempotency_key="k")], batch=False)
    writes.write(deps, ALICE, stream_id, [writes.Entry("a", idempotency_key="k")], batch=False)
    m, a, d, r = RecordKind.MESSAGE, RecordKind.ATTACH, RecordKind.DETACH, RecordKind.REDACTION
    assert reported == [[a], [a], [m, m], [r], [d], [m]]


def test_a_group_reports_its_appends_only_after_it_commits(tmp_path: Path) -> None:
    reported: list[int] = []
    store = SqliteLogStore(
        tmp_path, on_append=lambda records: reported.extend(r.seq for r in records)
    )
    deps = Deps(store=store, signer=load_or_create(tmp_path))
    try:
        stream_id = conversation(deps)
        with store.group():
            write(deps, stream_id, writes.Entry("one"))
            write(deps, stream_id, writes.Entry("two"))
            assert reported == [1]
        assert reported == [1, 2, 3]
        with pytest.raises(RuntimeError), store.group():
            write(deps, stream_id, writes.Entry("three"))
            raise RuntimeError("the group fails before its commit")
        assert reported == [1, 2, 3]
    finally:
        store.close()


def test_whole_stream_reads_cross_pages_in_order(
    deps: Deps, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sql_reader, "PAGE", 4)
    stream_id = conversation(deps)
    for i in range(12):
        write(deps, stream_id, writes.Entry(f"m{i}"))
    reader = deps.store.reader()
    stream = reader.get_stream("acme", stream_id)
    assert stream is not None
    assert [r.seq for r in reader.iter_records(stream)] == list(range(1, 14))
    nodes = sorted(coord for coord, _ in reader.iter_nodes(stream))
    assert nodes == sorted(c for c in merkle.all_nodes([bytes(32)] * 13) if c[0] > 0)
    assert [cp.size for cp in reader.iter_checkpoints(stream)] == list(range(1, 14))
    verdict = verify_stream(deps, ALICE, stream_id, None)
    assert (verdict.ok, verdict.size, verdict.checkpoints_checked) == (True, 13, 13)
