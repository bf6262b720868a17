"""Writes of the log stores inside one unit of work, written once for SQLite and PostgreSQL."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace

from cairn_server.errors import AlreadyExists
from cairn_server.sqldb import Db
from recall_service.merkle import Coord
from recall_service.models import Checkpoint, Participant, Record, Stream
from recall_service.store.base import StreamHead
from recall_service.store.sql_reader import SqlLogReader
from recall_service.store.sql_rows import STREAM_COLUMNS, stream_of


class SqlLogTx(SqlLogReader):
    """Writes inside one transaction (SQLite: BEGIN IMMEDIATE or a savepoint of a group;
    PostgreSQL: a READ COMMITTED transaction on one pooled connection).

    `appended` collects the records this unit inserted, for whoever reports them once they
    are durable.
    """

    def __init__(self, db: Db, *, time_index: str = "") -> None:
        super().__init__(db, time_index=time_index)
        self._lock = db.for_update
        self.appended: list[Record] = []

    def lock_stream(self, tenant: str, stream_id: str) -> Stream | None:
        """The stream, read with its append lock held until the transaction ends.

        PostgreSQL locks the row (`FOR UPDATE`): another appender to the stream, in any
        process, waits here until this transaction ends, then reads the row as this one left
        it, and READ COMMITTED gives its later statements snapshots that include this one's
        records. On SQLite the writer transaction already holds the whole database.
        """
        row = self._c.execute(
            f"SELECT {STREAM_COLUMNS} FROM streams WHERE tenant = ? AND id = ?{self._lock}",
            (tenant, stream_id),
        ).fetchone()
        return None if row is None else stream_of(row)

    def insert_stream(self, stream: Stream) -> Stream:
        """Stores a new stream; returns it with its key.

        Raises AlreadyExists when the tenant has a stream of that id, including one created
        by a concurrent transaction that committed first (PostgreSQL waits for it on the
        unique index, then inserts nothing).
        """
        row = self._c.execute(
            "INSERT INTO streams (tenant, id, kind, created_by, created_at, genesis, size, head,"
            " root, last_time, frontier) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
            " ON CONFLICT (tenant, id) DO NOTHING RETURNING rowkey",
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
        ).fetchone()
        if row is None:
            raise AlreadyExists(f"stream '{stream.id}' already exists")
        return replace(stream, key=row[0])

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
            " created_at, idempotency_key, leaf_hash, chain_hash, occurred_at)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
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
                    r.occurred_at,
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
        self.appended.extend(records)
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
            "INSERT INTO participants (stream, agent_id, role, attached_seq, attached_at,"
            " detached_seq) VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (stream, agent_id) DO UPDATE"
            " SET role = excluded.role, attached_seq = excluded.attached_seq,"
            " attached_at = excluded.attached_at, detached_seq = excluded.detached_seq",
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
        """Sets a record's content and salt to NULL and deletes its client-supplied vector."""
        self._c.execute(
            "UPDATE records SET content = NULL, salt = NULL WHERE stream = ? AND seq = ?",
            (stream.key, seq),
        )
        self._c.execute(
            "DELETE FROM record_vectors WHERE stream = ? AND seq = ?", (stream.key, seq)
        )

    def put_vectors(self, stream: Stream, vectors: Sequence[tuple[int, bytes]]) -> None:
        """Stores client-supplied vectors of records just appended, by seq."""
        if vectors:
            self._c.executemany(
                "INSERT INTO record_vectors (stream, seq, vector) VALUES (?, ?, ?)",
                [(stream.key, seq, blob) for seq, blob in vectors],
            )
