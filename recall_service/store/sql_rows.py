"""Rows of the recall log's tables (SQLite and PostgreSQL alike), and the domain objects they
hold."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from recall_service.models import (
    Checkpoint,
    Participant,
    Record,
    RecordKind,
    Role,
    Stream,
    StreamKind,
)

STREAM_COLUMNS = (
    "rowkey, tenant, id, kind, created_by, created_at, genesis, size, head, root, last_time,"
    " frontier"
)
RECORD_COLUMNS = (
    "r.seq, r.kind, r.source_agent_id, r.written_by, r.subject_agent_id, r.role, r.target_seq,"
    " r.content, r.salt, r.content_hash, r.tags, r.metadata, r.created_at, r.idempotency_key,"
    " r.leaf_hash, r.chain_hash, r.occurred_at"
)
RECORD_WIDTH = 17  # the columns of RECORD_COLUMNS
# The seq of the REDACTION record that erased an erased record (0 while it has content).
REDACTED_BY = (
    "CASE WHEN r.content IS NULL THEN coalesce((SELECT x.seq FROM records x"
    " WHERE x.stream = r.stream AND x.kind = 4 AND x.target_seq = r.seq), 0) ELSE 0 END"
)
CHECKPOINT_COLUMNS = "size, root, head, time, key_id, signature"


_STREAM_KINDS = {int(kind): kind for kind in StreamKind}


def stream_of(row: Sequence[Any]) -> Stream:
    """A stream from its row. A search over many streams reads every one of them (100 rows for
    100 streams), so this avoids keywords, the enum's lookup and a generator: about a third
    less per row (3.9 µs before, 2.3 to 2.8 after, in different hours of one machine)."""
    peaks = row[11]
    return Stream(
        row[0],
        row[1],
        row[2],
        _STREAM_KINDS[row[3]],
        row[4],
        row[5],
        row[6],
        row[7],
        row[8],
        row[9],
        row[10],
        tuple([peaks[i : i + 32] for i in range(0, len(peaks), 32)]),
    )


def record_of(stream_id: str, row: Sequence[Any], redacted_by: int = 0) -> Record:
    """A record from RECORD_COLUMNS."""
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
        occurred_at=row[16],
    )


def checkpoint_of(stream: Stream, row: Sequence[Any]) -> Checkpoint:
    """A checkpoint from CHECKPOINT_COLUMNS."""
    return Checkpoint(stream.tenant, stream.id, row[0], row[1], row[2], row[3], row[4], row[5])


def participant_of(row: Sequence[Any]) -> Participant:
    """A participant from its row."""
    return Participant(row[0], Role(row[1]), row[2], row[3], row[4])
