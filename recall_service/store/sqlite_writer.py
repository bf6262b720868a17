"""Writes of the embedded log store, inside one transaction on the writer connection."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace

from recall_service.merkle import Coord
from recall_service.models import Checkpoint, Participant, Record, Stream
from recall_service.store.base import StreamHead
from recall_service.store.sqlite_reader import SqliteLogReader


class SqliteLogTx(SqliteLogReader):
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
