"""Tampering with the stored log directly is caught and located, on SQLite and PostgreSQL.

Each test writes a stream of ten records (seq 1 attaches the owner, 2-10 are messages), keeps
the checkpoint a client would have kept, closes the store, edits the tables with plain SQL
the way an attacker with the database would (`recall.sqlite3` through sqlite3; the schema
through psycopg), reopens it and verifies.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import psycopg
import pytest

from cairn import verify
from cairn_server.auth import Principal, Role
from cairn_server.sqldb import to_psycopg
from recall_service import merkle, redaction, streams, writes
from recall_service.canonical import canonical_of, chain_next, content_hash, leaf_hash, seal
from recall_service.convert import checkpoint_to_pb, record_to_pb
from recall_service.core import Deps
from recall_service.models import Checkpoint, Draft, Record, RecordKind, StreamKind
from recall_service.signing import load_or_create
from recall_service.store import sql_reader
from recall_service.store.base import LogStore
from recall_service.store.postgres import PostgresRecallStore
from recall_service.store.sqlite import LOG_FILE, SqliteLogStore
from recall_service.verification import Verdict, verify_stream

ALICE = Principal("acme", "alice", Role.AGENT)
Statement = tuple[str, tuple[object, ...]]


@dataclass
class Log:
    """A closed log in its database, and what a client kept of it."""

    data_dir: Path
    stream_id: str
    kept: Checkpoint
    postgres: tuple[str, str] | None = None  # (url, schema), or SQLite in data_dir

    def open(self) -> LogStore:
        if self.postgres is None:
            return SqliteLogStore(self.data_dir)
        url, schema = self.postgres
        return PostgresRecallStore(url, schema, pool_size=2)

    def sql(self, *statements: Statement) -> None:
        """Runs statements (`?` placeholders) in one transaction, beside the service."""
        if self.postgres is None:
            conn = sqlite3.connect(self.data_dir / LOG_FILE)
            with conn:
                for statement, params in statements:
                    conn.execute(statement, params)
            conn.close()
            return
        url, schema = self.postgres
        with psycopg.connect(url, options=f"-c search_path={schema}") as pg, pg.transaction():
            for statement, params in statements:
                pg.execute(to_psycopg(statement), params or None)

    def query(self, statement: str, params: tuple[object, ...] = ()) -> list[tuple[Any, ...]]:
        """The rows of one query."""
        if self.postgres is None:
            conn = sqlite3.connect(self.data_dir / LOG_FILE)
            rows = conn.execute(statement, params).fetchall()
            conn.close()
            return rows
        url, schema = self.postgres
        with psycopg.connect(url, options=f"-c search_path={schema}") as pg:
            return pg.execute(to_psycopg(statement), params or None).fetchall()

    def files_holding(self, text: bytes) -> list[str]:
        """The store's files whose bytes contain `text` (PostgreSQL: the pages of the
        records table and its TOAST table, read raw through pageinspect, free space and
        dead row versions included)."""
        if self.postgres is None:
            return [
                path.name
                for path in sorted(self.data_dir.iterdir())
                if path.name.startswith(LOG_FILE) and text in path.read_bytes()
            ]
        url, schema = self.postgres
        with psycopg.connect(url, autocommit=True, options=f"-c search_path={schema}") as pg:
            # Dropped with the test's schema (unless another schema holds it already).
            pg.execute(f'CREATE EXTENSION IF NOT EXISTS pageinspect SCHEMA "{schema}"'.encode())
            ((home,),) = pg.execute(
                "SELECT n.nspname FROM pg_extension e JOIN pg_namespace n"
                " ON n.oid = e.extnamespace WHERE e.extname = 'pageinspect'"
            ).fetchall()
            rows = pg.execute(
                f'SELECT c.oid::regclass::text, "{home}".get_raw_page(c.oid::regclass::text, n)'
                " FROM pg_class c, generate_series(0, (pg_relation_size(c.oid)"
                " / current_setting('block_size')::int)::int - 1) AS n"
                " WHERE c.oid = 'records'::regclass OR c.oid = (SELECT reltoastrelid"
                " FROM pg_class WHERE oid = 'records'::regclass)".encode()
            ).fetchall()
        return sorted({name for name, page in rows if text in page})

    def verify(self, trusted: Checkpoint | None = None) -> Verdict:
        store = self.open()
        try:
            deps = Deps(store=store, signer=load_or_create(self.data_dir))
            return verify_stream(deps, ALICE, self.stream_id, trusted)
        finally:
            store.close()

    def records(self) -> list[Record]:
        store = self.open()
        try:
            stream = store.reader().get_stream("acme", self.stream_id)
            assert stream is not None
            return list(store.reader().iter_records(stream))
        finally:
            store.close()


@pytest.fixture(autouse=True)
def small_pages(monkeypatch: pytest.MonkeyPatch) -> None:
    """Whole-stream reads fetch 3 rows per query here, so every attack is read across pages."""
    monkeypatch.setattr(sql_reader, "PAGE", 3)


@pytest.fixture(params=["sqlite", "postgres"])
def log(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Log]:
    postgres = None
    if request.param == "postgres":
        postgres = (
            request.getfixturevalue("postgres_url"),
            request.getfixturevalue("postgres_schema"),
        )
    empty = Log(tmp_path, "", Checkpoint("", "", 0, b"", b"", 0, "", b""), postgres)
    store = empty.open()
    deps = Deps(store=store, signer=load_or_create(tmp_path))
    stream, _, _ = streams.create_stream(deps, ALICE, "talk", StreamKind.CONVERSATION, "")
    kept = None
    for i in range(2, 11):
        result = writes.write(
            deps,
            ALICE,
            stream.id,
            [writes.Entry(f"message {i}", tags=("t",), metadata_json=f'{{"n": {i}}}')],
            batch=False,
        )
        kept = result.checkpoint
    store.close()
    assert kept is not None and kept.size == 10
    yield replace(empty, stream_id=stream.id, kept=kept)


def key(log: Log) -> int:
    ((rowkey,),) = log.query("SELECT rowkey FROM streams WHERE id = ?", (log.stream_id,))
    return int(rowkey)


def test_untouched_log_verifies(log: Log) -> None:
    verdict = log.verify(log.kept)
    assert verdict == Verdict(True, 10, log.kept.head, log.kept.root, 0, "", 10)


def test_changed_content_is_caught_at_its_record(log: Log) -> None:
    log.sql(("UPDATE records SET content = 'message 5, revised' WHERE seq = 5", ()))
    verdict = log.verify()
    assert (verdict.ok, verdict.first_bad_seq) == (False, 5)
    assert verdict.reason == "record 5: its content does not match its content_hash"
    assert verdict.size == 4


LEAF_REASON = (
    "record 5: its leaf_hash does not match its fields (kind, author, writer, tags, metadata, "
    "time, idempotency key or content hash changed)"
)


@pytest.mark.parametrize(
    "change",
    [
        "tags = '[\"forged\"]'",
        "metadata = '{\"n\":500}'",
        "source_agent_id = 'mallory'",
        "written_by = 'agent:mallory'",
        "created_at = created_at + 1",
        "occurred_at = 1683504000000000",
    ],
    ids=["tag", "metadata", "author", "writer", "timestamp", "said-at time"],
)
def test_changed_field_is_caught_at_its_record(log: Log, change: str) -> None:
    log.sql((f"UPDATE records SET {change} WHERE seq = 5", ()))
    verdict = log.verify()
    assert (verdict.ok, verdict.first_bad_seq, verdict.reason) == (False, 5, LEAF_REASON)


def test_deleted_middle_record_is_caught_where_it_is_missing(log: Log) -> None:
    log.sql(("DELETE FROM records WHERE seq = 5", ()))
    verdict = log.verify()
    assert (verdict.ok, verdict.first_bad_seq) == (False, 5)
    assert verdict.reason == "record 5 is missing (the next stored record is 6)"


def test_swapped_records_are_caught_at_the_first_of_them(log: Log) -> None:
    log.sql(
        ("UPDATE records SET seq = -4 WHERE seq = 4", ()),
        ("UPDATE records SET seq = 4 WHERE seq = 5", ()),
        ("UPDATE records SET seq = 5 WHERE seq = -4", ()),
    )
    verdict = log.verify()
    assert (verdict.ok, verdict.first_bad_seq) == (False, 4)
    assert verdict.reason == (
        "record 4: its leaf_hash does not match its fields (kind, author, writer, tags, "
        "metadata, time, idempotency key or content hash changed)"
    )


def test_inserted_record_is_caught_where_it_was_inserted(log: Log) -> None:
    stream = key(log)
    log.sql(
        ("UPDATE records SET seq = -seq WHERE stream = ? AND seq >= 5", (stream,)),
        ("UPDATE records SET seq = 1 - seq WHERE stream = ? AND seq < 0", (stream,)),
        (
            "INSERT INTO records SELECT stream, 5, kind, 'mallory', written_by, subject_agent_id,"
            " role, target_seq, 'I was here all along', salt, content_hash, tags, metadata,"
            " created_at, '', leaf_hash, chain_hash, occurred_at FROM records"
            " WHERE stream = ? AND seq = 4",
            (stream,),
        ),
    )
    verdict = log.verify()
    assert (verdict.ok, verdict.first_bad_seq) == (False, 5)
    assert verdict.reason == "record 5: its content does not match its content_hash"


def test_well_forged_inserted_record_is_caught_where_it_was_inserted(log: Log) -> None:
    stream = key(log)
    records = log.records()
    forged = seal(
        Draft(RecordKind.MESSAGE, "alice", "agent:alice", "I was here all along"),
        log.stream_id,
        5,
        records[3].created_at,
        bytes(32),
        records[3].chain_hash,
    )
    log.sql(
        ("UPDATE records SET seq = -seq WHERE stream = ? AND seq >= 5", (stream,)),
        ("UPDATE records SET seq = 1 - seq WHERE stream = ? AND seq < 0", (stream,)),
        (
            "INSERT INTO records VALUES (?, 5, 1, 'alice', 'agent:alice', '', 0, 0, ?, ?, ?,"
            " '[]', '{}', ?, '', ?, ?, NULL)",
            (
                stream,
                forged.content,
                forged.salt,
                forged.content_hash,
                forged.created_at,
                forged.leaf_hash,
                forged.chain_hash,
            ),
        ),
    )
    verdict = log.verify()
    assert (verdict.ok, verdict.first_bad_seq) == (False, 5)
    assert verdict.reason == (
        "the signed checkpoint at size 5 does not match the records: history in records 5-5 "
        "was changed"
    )


def test_erased_content_without_a_redaction_is_caught(log: Log) -> None:
    log.sql(("UPDATE records SET content = NULL, salt = NULL WHERE seq = 6", ()))
    verdict = log.verify()
    assert (verdict.ok, verdict.first_bad_seq) == (False, 6)
    assert verdict.reason == "record 6 has no content, but no REDACTION record erased it"


def test_tampered_merkle_node_is_caught_at_the_records_it_covers(log: Log) -> None:
    log.sql(("UPDATE merkle_nodes SET hash = ? WHERE level = 1 AND idx = 2", (bytes(32),)))
    verdict = log.verify()
    assert (verdict.ok, verdict.first_bad_seq) == (False, 5)
    assert verdict.reason == "the Merkle node over records 5-6 does not match them"


def test_tampered_frontier_is_caught(log: Log) -> None:
    log.sql(("UPDATE streams SET frontier = ?", (bytes(64),)))
    verdict = log.verify()
    assert (verdict.ok, verdict.first_bad_seq) == (False, 10)
    assert verdict.reason == (
        "the stream's recorded chain head, root or Merkle frontier does not match its records"
    )


def test_deleted_tail_without_fixing_the_stream_is_caught(log: Log) -> None:
    log.sql(("DELETE FROM records WHERE seq > 8", ()))
    verdict = log.verify()
    assert (verdict.ok, verdict.first_bad_seq) == (False, 9)
    assert verdict.reason == (
        "the stream records 10 records but only 8 are stored: records 9-10 are missing"
    )


def truncate_to(log: Log, size: int) -> None:
    """What a careful attacker does: drop the tail and everything derived from it, and
    point the stream back at its state at `size`."""
    stream = key(log)
    ((root, head),) = log.query(
        "SELECT root, head FROM checkpoints WHERE stream = ? AND size = ?", (stream, size)
    )
    peaks, _, _ = merkle.append([], 0, [r.leaf_hash for r in log.records()[:size]])
    log.sql(
        ("DELETE FROM records WHERE stream = ? AND seq > ?", (stream, size)),
        ("DELETE FROM record_tags WHERE stream = ? AND seq > ?", (stream, size)),
        ("DELETE FROM checkpoints WHERE stream = ? AND size > ?", (stream, size)),
        ("DELETE FROM merkle_nodes WHERE stream = ? AND ((idx + 1) << level) > ?", (stream, size)),
        (
            "UPDATE streams SET size = ?, root = ?, head = ?, frontier = ? WHERE rowkey = ?",
            (size, root, head, b"".join(peaks), stream),
        ),
    )


def test_truncated_tail_is_caught_against_a_checkpoint_the_client_kept(log: Log) -> None:
    truncate_to(log, 8)
    # The server alone cannot tell: what is left is a consistent, signed log of 8 records.
    assert log.verify().ok is True
    verdict = log.verify(log.kept)
    assert (verdict.ok, verdict.first_bad_seq, verdict.size) == (False, 9, 8)
    assert verdict.reason == (
        "the log has 8 verifiable records but the checkpoint you kept covers 10: "
        "records 9-10 were removed"
    )
    # The client sees the same without asking the server to verify.
    genesis = log_genesis(log)
    with pytest.raises(verify.VerificationError) as caught:
        verify.verify_log(
            [record_to_pb(r) for r in log.records()],
            genesis,
            checkpoint_to_pb(log.kept),
            load_or_create(log.data_dir).public_key,
        )
    assert caught.value.seq == 9
    assert str(caught.value) == (
        "the checkpoint covers 10 records but only 8 were given: records 9-10 are missing"
    )


def log_genesis(log: Log) -> bytes:
    ((genesis,),) = log.query("SELECT genesis FROM streams WHERE id = ?", (log.stream_id,))
    return bytes(genesis)


def recompute_from(log: Log, seq: int, content: str) -> None:
    """What an attacker without the signing key does: change record `seq`, then recompute
    every hash after it, the Merkle nodes and the stream's head so that the chain is whole."""
    stream = key(log)
    records = log.records()
    genesis = log_genesis(log)
    previous = genesis if seq == 1 else records[seq - 2].chain_hash
    rewritten: list[Record] = records[: seq - 1]
    for original in records[seq - 1 :]:
        changed = original
        if original.seq == seq:
            assert original.salt is not None
            changed = replace(
                original, content=content, content_hash=content_hash(original.salt, content)
            )
        leaf = leaf_hash(canonical_of(changed))
        changed = replace(changed, leaf_hash=leaf, chain_hash=chain_next(previous, leaf))
        previous = changed.chain_hash
        rewritten.append(changed)
    nodes = merkle.all_nodes([r.leaf_hash for r in rewritten])
    statements: list[Statement] = [
        (
            "UPDATE records SET content = ?, content_hash = ?, leaf_hash = ?, chain_hash = ?"
            " WHERE stream = ? AND seq = ?",
            (r.content, r.content_hash, r.leaf_hash, r.chain_hash, stream, r.seq),
        )
        for r in rewritten[seq - 1 :]
    ]
    statements += [
        (
            "UPDATE merkle_nodes SET hash = ? WHERE stream = ? AND level = ? AND idx = ?",
            (digest, stream, level, index),
        )
        for (level, index), digest in nodes.items()
        if level > 0
    ]
    peaks, _, _ = merkle.append([], 0, [r.leaf_hash for r in rewritten])
    statements.append(
        (
            "UPDATE streams SET head = ?, root = ?, frontier = ? WHERE rowkey = ?",
            (previous, merkle.root_of_peaks(peaks), b"".join(peaks), stream),
        )
    )
    log.sql(*statements)


def test_recomputed_chain_is_caught_by_the_stored_checkpoints(log: Log) -> None:
    recompute_from(log, 5, "message 5, as the attacker would have it")
    verdict = log.verify()
    assert (verdict.ok, verdict.first_bad_seq) == (False, 5)
    assert verdict.reason == (
        "the signed checkpoint at size 5 does not match the records: history in records 5-5 "
        "was changed"
    )


def rewrite_checkpoints(log: Log, delete: bool) -> None:
    """Makes the stored checkpoints agree with the rewritten records: rows are easy to
    change, signatures are not."""
    stream = key(log)
    heads = dict(log.query("SELECT seq, chain_hash FROM records WHERE stream = ?", (stream,)))
    records = log.records()
    nodes = merkle.all_nodes([r.leaf_hash for r in records])
    statements: list[Statement] = []
    for size in range(5, 11):
        if delete:
            statements.append(
                ("DELETE FROM checkpoints WHERE stream = ? AND size = ?", (stream, size))
            )
        else:
            root = merkle.root(merkle.from_mapping(nodes), size)
            statements.append(
                (
                    "UPDATE checkpoints SET head = ?, root = ? WHERE stream = ? AND size = ?",
                    (heads[size], root, stream, size),
                )
            )
    log.sql(*statements)


def test_recomputed_chain_with_forged_checkpoints_is_caught_by_the_signature(log: Log) -> None:
    recompute_from(log, 5, "message 5, as the attacker would have it")
    rewrite_checkpoints(log, delete=False)
    verdict = log.verify()
    assert (verdict.ok, verdict.first_bad_seq) == (False, 5)
    assert verdict.reason == (
        "the checkpoint at size 5 has an invalid signature: records 5-5 are not what this "
        "server signed"
    )


def test_recomputed_chain_with_checkpoints_dropped_is_caught_as_unsigned(log: Log) -> None:
    recompute_from(log, 5, "message 5, as the attacker would have it")
    rewrite_checkpoints(log, delete=True)
    verdict = log.verify()
    assert (verdict.ok, verdict.first_bad_seq) == (False, 5)
    assert verdict.reason == "records 5-10 are not covered by any signed checkpoint"


def test_recomputed_chain_is_caught_by_a_client_holding_a_checkpoint(log: Log) -> None:
    recompute_from(log, 5, "message 5, as the attacker would have it")
    records = [record_to_pb(r) for r in log.records()]
    # Every record verifies on its own terms: the chain is whole again...
    verify.verify_records(records, log_genesis(log))
    # ...but not against the signed checkpoint the client kept.
    with pytest.raises(verify.VerificationError) as caught:
        verify.verify_log(
            records,
            log_genesis(log),
            checkpoint_to_pb(log.kept),
            load_or_create(log.data_dir).public_key,
        )
    assert str(caught.value) == (
        "the chain head at record 10 differs from the checkpoint's: the history it covers "
        "was rewritten"
    )


def test_redacted_record_still_verifies_and_its_content_is_gone_from_disk(log: Log) -> None:
    store = log.open()
    deps = Deps(store=store, signer=load_or_create(log.data_dir))
    owner = Principal("acme", "alice", Role.AGENT)
    writes.write(deps, owner, log.stream_id, [writes.Entry("my secret is 8471")], batch=False)
    assert log.files_holding(b"my secret is 8471") != []  # the check sees what is there
    record, _ = redaction.redact(deps, owner, log.stream_id, 11, "shared by mistake")
    store.close()
    assert (record.seq, record.target_seq, record.content) == (12, 11, "shared by mistake")
    erased = log.records()[10]
    assert (erased.content, erased.salt, len(erased.content_hash)) == (None, None, 32)
    assert log.verify(log.kept).ok is True
    # SQLite: the database file and its WAL. PostgreSQL: the records table's pages (and its
    # TOAST table); its WAL keeps the text until the segment is recycled (docs).
    assert log.files_holding(b"my secret is 8471") == []
