"""The embedded log store: `recall.sqlite3` in WAL mode, one writer, a reader per thread.

SQLite has one writer, so `append` takes the database's write lock (BEGIN IMMEDIATE): appends
to one stream are serialized, and so are appends to different streams, by SQLite itself and
nothing more. `secure_delete` is on so that a redaction overwrites the erased content on disk.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

from cairn_server import sqlite as sqlite_util
from recall_service.merkle import Coord
from recall_service.models import (
    Checkpoint,
    Participant,
    Record,
    RecordKind,
    Role,
    Stream,
    StreamKind,
)
from recall_service.store.base import RecordQuery, StreamHead

LOG_FILE = "recall.sqlite3"

_STREAM_COLUMNS = (
    "rowkey, tenant, id, kind, created_by, created_at, genesis, size, head, root, last_time,"
    " frontier"
)
_RECORD_COLUMNS = (
    "r.seq, r.kind, r.source_agent_id, r.written_by, r.subject_agent_id, r.role, r.target_seq,"
    " r.content, r.salt, r.content_hash, r.tags, r.metadata, r.created_at, r.idempotency_key,"
    " r.leaf_hash, r.chain_hash"
)
# The seq of the REDACTION record that erased an erased record (0 while it has content).
_REDACTED_BY = (
    "CASE WHEN r.content IS NULL THEN coalesce((SELECT x.seq FROM records x"
    " WHERE x.stream = r.stream AND x.kind = 4 AND x.target_seq = r.seq), 0) ELSE 0 END"
)
_CHECKPOINT_COLUMNS = "size, root, head, time, key_id, signature"


def _stream(row: Sequence[Any]) -> Stream:
    return Stream(
        key=row[0],
        tenant=row[1],
        id=row[2],
        kind=StreamKind(row[3]),
        created_by=row[4],
        created_at=row[5],
        genesis=row[6],
        size=row[7],
        head=row[8],
        root=row[9],
        last_time=row[10],
        frontier=tuple(row[11][i : i + 32] for i in range(0, len(row[11]), 32)),
    )


def _record(stream_id: str, row: Sequence[Any], redacted_by: int = 0) -> Record:
    return Record(
        stream_id=stream_id,
        seq=row[0],
        kind=RecordKind(row[1]),
        source_agent_id=row[2],
        written_by=row[3],
        subject_agent_id=row[4],
        role=Role(row[5]),
        target_seq=row[6],
        content=row[7],
        salt=row[8],
        content_hash=row[9],
        tags=tuple(json.loads(row[10])),
        metadata_json=row[11],
        created_at=row[12],
        idempotency_key=row[13],
        leaf_hash=row[14],
        chain_hash=row[15],
        redacted_by=redacted_by,
    )


def _checkpoint(stream: Stream, row: Sequence[Any]) -> Checkpoint:
    return Checkpoint(stream.tenant, stream.id, row[0], row[1], row[2], row[3], row[4], row[5])


def _participant(row: Sequence[Any]) -> Participant:
    return Participant(row[0], Role(row[1]), row[2], row[3], row[4])


class _Reader:
    """Queries over one connection."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._c = conn

    def get_stream(self, tenant: str, stream_id: str) -> Stream | None:
        """The stream, or None (also for another tenant's)."""
        row = self._c.execute(
            f"SELECT {_STREAM_COLUMNS} FROM streams WHERE tenant = ? AND id = ?",
            (tenant, stream_id),
        ).fetchone()
        return None if row is None else _stream(row)

    def list_streams(
        self, tenant: str, *, after: int, limit: int, kind: StreamKind | None, agent: str | None
    ) -> list[tuple[int, Stream]]:
        """Up to `limit` streams after row key `after`, in creation order."""
        where = ""
        params: list[Any] = []
        if kind is not None:
            where += " AND kind = ?"
            params.append(int(kind))
        if agent is not None:
            where += (
                " AND rowkey IN (SELECT stream FROM participants"
                " WHERE agent_id = ? AND detached_seq = 0)"
            )
            params.append(agent)
        rows = self._c.execute(
            f"SELECT {_STREAM_COLUMNS} FROM streams WHERE tenant = ? AND rowkey > ?{where}"
            " ORDER BY rowkey LIMIT ?",
            [tenant, after, *params, limit],
        ).fetchall()
        return [(row[0], _stream(row)) for row in rows]

    def participant(self, stream: Stream, agent_id: str) -> Participant | None:
        """The agent's participant row (active or detached), or None."""
        found = self.participants(stream, [agent_id])
        return found.get(agent_id)

    def participants(self, stream: Stream, agent_ids: Sequence[str]) -> dict[str, Participant]:
        """Participant rows of several agents."""
        unique = list(dict.fromkeys(agent_ids))
        if not unique:
            return {}
        marks = ",".join("?" * len(unique))
        rows = self._c.execute(
            "SELECT agent_id, role, attached_seq, attached_at, detached_seq FROM participants"
            f" WHERE stream = ? AND agent_id IN ({marks})",
            [stream.key, *unique],
        ).fetchall()
        return {row[0]: _participant(row) for row in rows}

    def membership_events(self, stream: Stream, upto_seq: int) -> list[Record]:
        """ATTACH and DETACH records up to `upto_seq`, in log order."""
        rows = self._c.execute(
            f"SELECT {_RECORD_COLUMNS} FROM records r WHERE r.stream = ? AND r.seq <= ?"
            " AND r.kind IN (2, 3) ORDER BY r.seq",
            (stream.key, upto_seq),
        ).fetchall()
        return [_record(stream.id, row) for row in rows]

    def record(self, stream: Stream, seq: int) -> Record | None:
        """One record."""
        row = self._c.execute(
            f"SELECT {_RECORD_COLUMNS}, {_REDACTED_BY} FROM records r"
            " WHERE r.stream = ? AND r.seq = ?",
            (stream.key, seq),
        ).fetchone()
        return None if row is None else _record(stream.id, row, row[16])

    def records(
        self, stream: Stream, query: RecordQuery, *, after: int, limit: int
    ) -> list[Record]:
        """Up to `limit` records matching `query`, after `after` in the query's order."""
        where: list[str] = []
        params: list[Any] = [stream.key]
        if after:
            where.append("r.seq < ?" if query.newest_first else "r.seq > ?")
            params.append(after)
        if not query.include_events:
            where.append("r.kind = 1")
        if query.authors:
            where.append(f"r.source_agent_id IN ({','.join('?' * len(query.authors))})")
            params.extend(query.authors)
        if query.first_seq:
            where.append("r.seq >= ?")
            params.append(query.first_seq)
        if query.last_seq:
            where.append("r.seq <= ?")
            params.append(query.last_seq)
        if query.start is not None:
            where.append("r.created_at >= ?")
            params.append(query.start)
        if query.end is not None:
            where.append("r.created_at < ?")
            params.append(query.end)
        if query.tags:
            marks = ",".join("?" * len(query.tags))
            having = " GROUP BY seq HAVING COUNT(*) = ?" if query.match_all_tags else ""
            where.append(
                f"r.seq IN (SELECT seq FROM record_tags WHERE stream = ? AND tag IN ({marks})"
                f"{having})"
            )
            params.extend([stream.key, *query.tags])
            if query.match_all_tags:
                params.append(len(set(query.tags)))
        clause = "".join(f" AND {w}" for w in where)
        order = "DESC" if query.newest_first else "ASC"
        rows = self._c.execute(
            f"SELECT {_RECORD_COLUMNS}, {_REDACTED_BY} FROM records r WHERE r.stream = ?{clause}"
            f" ORDER BY r.seq {order} LIMIT ?",
            [*params, limit],
        ).fetchall()
        return [_record(stream.id, row, row[16]) for row in rows]

    def by_idempotency_keys(self, stream: Stream, keys: Sequence[str]) -> dict[str, Record]:
        """Records written with these idempotency keys."""
        unique = [k for k in dict.fromkeys(keys) if k]
        found: dict[str, Record] = {}
        for start in range(0, len(unique), 500):
            chunk = unique[start : start + 500]
            marks = ",".join("?" * len(chunk))
            rows = self._c.execute(
                f"SELECT {_RECORD_COLUMNS}, {_REDACTED_BY} FROM records r"
                f" WHERE r.stream = ? AND r.idempotency_key IN ({marks})",
                [stream.key, *chunk],
            ).fetchall()
            for row in rows:
                record = _record(stream.id, row, row[16])
                found[record.idempotency_key] = record
        return found

    def overlapping(
        self, stream: Stream, within: int, *, after: tuple[int, int], limit: int
    ) -> list[tuple[Record, Record]]:
        """Pairs of MESSAGE records by different authors at most `within` µs apart."""
        a_columns = _RECORD_COLUMNS.replace("r.", "a.")
        rows = self._c.execute(
            f"SELECT {_RECORD_COLUMNS}, {a_columns} FROM records r"
            " JOIN records a INDEXED BY records_by_time ON a.stream = r.stream"
            " AND a.created_at >= r.created_at - ? AND a.created_at <= r.created_at"
            " AND a.seq < r.seq AND a.kind = 1 AND a.source_agent_id != r.source_agent_id"
            " WHERE r.stream = ? AND r.kind = 1 AND r.seq >= ? AND (r.seq, a.seq) > (?, ?)"
            " ORDER BY r.seq, a.seq LIMIT ?",
            (within, stream.key, after[0], after[0], after[1], limit),
        ).fetchall()
        return [(_record(stream.id, row[16:]), _record(stream.id, row[:16])) for row in rows]

    def nodes(self, stream: Stream, coords: Sequence[Coord]) -> dict[Coord, bytes]:
        """Stored Merkle nodes; level-0 nodes are the records' leaf hashes.

        One primary-key lookup per node: a proof needs O(log n) of them, and each is a
        B-tree descent, whatever the stream's size.
        """
        found: dict[Coord, bytes] = {}
        for level, index in coords:
            if level == 0:
                row = self._c.execute(
                    "SELECT leaf_hash FROM records WHERE stream = ? AND seq = ?",
                    (stream.key, index + 1),
                ).fetchone()
            else:
                row = self._c.execute(
                    "SELECT hash FROM merkle_nodes WHERE stream = ? AND level = ? AND idx = ?",
                    (stream.key, level, index),
                ).fetchone()
            if row is not None:
                found[(level, index)] = row[0]
        return found

    def latest_checkpoint(self, stream: Stream) -> Checkpoint | None:
        """The checkpoint of the largest size."""
        row = self._c.execute(
            f"SELECT {_CHECKPOINT_COLUMNS} FROM checkpoints WHERE stream = ?"
            " ORDER BY size DESC LIMIT 1",
            (stream.key,),
        ).fetchone()
        return None if row is None else _checkpoint(stream, row)

    def iter_records(self, stream: Stream) -> Iterator[Record]:
        """Every stored record in seq order, exactly as stored."""
        cursor = self._c.execute(
            f"SELECT {_RECORD_COLUMNS} FROM records r WHERE r.stream = ? ORDER BY r.seq",
            (stream.key,),
        )
        for row in cursor:
            yield _record(stream.id, row)

    def iter_nodes(self, stream: Stream) -> Iterator[tuple[Coord, bytes]]:
        """Every stored interior node."""
        cursor = self._c.execute(
            "SELECT level, idx, hash FROM merkle_nodes WHERE stream = ?", (stream.key,)
        )
        for level, index, digest in cursor:
            yield (level, index), digest

    def iter_checkpoints(self, stream: Stream) -> Iterator[Checkpoint]:
        """Every stored checkpoint by size."""
        cursor = self._c.execute(
            f"SELECT {_CHECKPOINT_COLUMNS} FROM checkpoints WHERE stream = ? ORDER BY size",
            (stream.key,),
        )
        for row in cursor:
            yield _checkpoint(stream, row)


class _Tx(_Reader):
    """Writes on the writer connection inside BEGIN IMMEDIATE ... COMMIT."""

    def insert_stream(self, stream: Stream) -> Stream:
        """Stores a new stream; returns it with its key."""
        cursor = self._c.execute(
            "INSERT INTO streams (tenant, id, kind, created_by, created_at, genesis, size, head,"
            " root, last_time, frontier) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                stream.tenant,
                stream.id,
                int(stream.kind),
                stream.created_by,
                stream.created_at,
                stream.genesis,
                stream.size,
                stream.head,
                stream.root,
                stream.last_time,
                b"".join(stream.frontier),
            ),
        )
        key = cursor.lastrowid
        assert key is not None
        return replace(stream, key=key)

    def append(
        self,
        stream: Stream,
        records: Sequence[Record],
        nodes: dict[Coord, bytes],
        head: StreamHead,
        checkpoint: Checkpoint,
    ) -> Stream:
        """Inserts records, interior nodes and a checkpoint; moves the head."""
        key = stream.key
        self._c.executemany(
            "INSERT INTO records (stream, seq, kind, source_agent_id, written_by,"
            " subject_agent_id, role, target_seq, content, salt, content_hash, tags, metadata,"
            " created_at, idempotency_key, leaf_hash, chain_hash)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [
                (
                    key,
                    r.seq,
                    int(r.kind),
                    r.source_agent_id,
                    r.written_by,
                    r.subject_agent_id,
                    int(r.role),
                    r.target_seq,
                    r.content,
                    r.salt,
                    r.content_hash,
                    json.dumps(list(r.tags), ensure_ascii=False),
                    r.metadata_json,
                    r.created_at,
                    r.idempotency_key,
                    r.leaf_hash,
                    r.chain_hash,
                )
                for r in records
            ],
        )
        tagged = [(key, tag, r.seq) for r in records for tag in r.tags]
        if tagged:
            self._c.executemany(
                "INSERT INTO record_tags (stream, tag, seq) VALUES (?, ?, ?)", tagged
            )
        inner = [(key, level, index, h) for (level, index), h in nodes.items() if level > 0]
        if inner:
            self._c.executemany(
                "INSERT INTO merkle_nodes (stream, level, idx, hash) VALUES (?, ?, ?, ?)", inner
            )
        self._c.execute(
            "INSERT INTO checkpoints (stream, size, root, head, time, key_id, signature)"
            " VALUES (?, ?, ?, ?, ?, ?, ?)",
            (
                key,
                checkpoint.size,
                checkpoint.root,
                checkpoint.head,
                checkpoint.time,
                checkpoint.key_id,
                checkpoint.signature,
            ),
        )
        self._c.execute(
            "UPDATE streams SET size = ?, head = ?, root = ?, last_time = ?, frontier = ?"
            " WHERE rowkey = ?",
            (head.size, head.head, head.root, head.last_time, b"".join(head.frontier), key),
        )
        return replace(
            stream,
            size=head.size,
            head=head.head,
            root=head.root,
            last_time=head.last_time,
            frontier=head.frontier,
        )

    def set_participant(self, stream: Stream, participant: Participant) -> None:
        """Inserts or replaces the agent's participant row."""
        self._c.execute(
            "INSERT OR REPLACE INTO participants (stream, agent_id, role, attached_seq,"
            " attached_at, detached_seq) VALUES (?, ?, ?, ?, ?, ?)",
            (
                stream.key,
                participant.agent_id,
                int(participant.role),
                participant.attached_seq,
                participant.attached_at,
                participant.detached_seq,
            ),
        )

    def erase_content(self, stream: Stream, seq: int) -> None:
        """Sets a record's content and salt to NULL."""
        self._c.execute(
            "UPDATE records SET content = NULL, salt = NULL WHERE stream = ? AND seq = ?",
            (stream.key, seq),
        )


class SqliteLogStore:
    """The log in `recall.sqlite3`. Writes are serialized on one connection; each reading
    thread has its own read-only connection, so reads never wait for a writer (WAL)."""

    def __init__(self, data_dir: Path) -> None:
        data_dir.mkdir(parents=True, exist_ok=True)
        self.path = data_dir / LOG_FILE
        self._writer = sqlite_util.connect(self.path)
        self._writer.execute("PRAGMA secure_delete=ON")
        sqlite_util.migrate(self._writer, "recall_service.store")
        self._write_lock = threading.RLock()
        self._grouped = False
        self._purge = False
        self._local = threading.local()
        self._readers: list[sqlite3.Connection] = []
        self._readers_lock = threading.Lock()

    def reader(self) -> _Reader:
        """Queries on this thread's own connection."""
        reader: _Reader | None = getattr(self._local, "reader", None)
        if reader is None:
            conn = sqlite_util.connect(self.path, read_only=True)
            with self._readers_lock:
                self._readers.append(conn)
            reader = self._local.reader = _Reader(conn)
        return reader

    @contextmanager
    def group(self) -> Iterator[None]:
        """One outer transaction for many units of work: inside it, `transaction()` and
        `append()` are savepoints, and the single COMMIT at the end makes them all durable
        with one fsync. Nothing inside is durable before this scope exits normally."""
        with self._write_lock:
            self._writer.execute("BEGIN IMMEDIATE")
            self._grouped = True
            try:
                yield
            except BaseException:
                self._grouped = False
                self._writer.execute("ROLLBACK")
                raise
            self._grouped = False
            try:
                self._writer.execute("COMMIT")
            except BaseException:
                if self._writer.in_transaction:
                    self._writer.execute("ROLLBACK")
                raise
        self._purge_if_requested()

    @contextmanager
    def transaction(self) -> Iterator[_Tx]:
        """BEGIN IMMEDIATE on the writer connection (a savepoint inside `group()`)."""
        with self._write_lock:
            tx = _Tx(self._writer)
            if self._grouped:
                self._writer.execute("SAVEPOINT unit")
                try:
                    yield tx
                except BaseException:
                    self._writer.execute("ROLLBACK TO unit")
                    self._writer.execute("RELEASE unit")
                    raise
                self._writer.execute("RELEASE unit")
                return
            self._writer.execute("BEGIN IMMEDIATE")
            try:
                yield tx
            except BaseException:
                self._writer.execute("ROLLBACK")
                raise
            self._writer.execute("COMMIT")
        self._purge_if_requested()

    @contextmanager
    def append(self, tenant: str, stream_id: str) -> Iterator[tuple[_Tx, Stream | None]]:
        """A transaction holding SQLite's write lock, with the stream read inside it."""
        with self.transaction() as tx:
            yield tx, tx.get_stream(tenant, stream_id)

    def purge_erased(self) -> None:
        """Folds the WAL into the database and truncates it once the current transaction
        commits, so content a redaction erased (overwritten in place: secure_delete) does
        not linger in WAL frames."""
        self._purge = True
        if not self._writer.in_transaction:
            self._purge_if_requested()

    def _purge_if_requested(self) -> None:
        with self._write_lock:
            if self._purge and not self._writer.in_transaction:
                self._purge = False
                self._writer.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    def close(self) -> None:
        """Closes every connection."""
        with self._readers_lock:
            for conn in self._readers:
                conn.close()
            self._readers.clear()
        with self._write_lock:
            self._writer.close()
