"""The canonical byte encoding of records, genesis values and checkpoints, and the hashes
over them. docs/log-format.md specifies every byte; this module is the server's
implementation of it (`cairn.verify` is the client's, written separately on purpose).

Integers are big-endian; a string is its UTF-8 byte length as u32 followed by the bytes; a
list of strings is its count as u32 followed by each string.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Sequence

from recall_service.models import Draft, Record, RecordKind, Role, StreamKind

RECORD_DOMAIN = "cairn.recall.record.v1"
# A record whose writer gave the time it was said: the v1 fields, then that time.
RECORD_DOMAIN_OCCURRED = "cairn.recall.record.v2"
GENESIS_DOMAIN = "cairn.recall.genesis.v1"
CHECKPOINT_DOMAIN = "cairn.recall.checkpoint.v1"
SALT_BYTES = 32
HASH_BYTES = 32
LEAF_PREFIX = b"\x00"

_U8 = struct.Struct(">B")
_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")
_I64 = struct.Struct(">q")


def _str(value: str) -> bytes:
    raw = value.encode("utf-8")
    return _U32.pack(len(raw)) + raw


def _strs(values: Sequence[str]) -> bytes:
    return _U32.pack(len(values)) + b"".join(_str(v) for v in values)


def _bytes32(value: bytes) -> bytes:
    if len(value) != HASH_BYTES:
        raise ValueError(f"expected {HASH_BYTES} bytes, got {len(value)}")
    return value


def content_hash(salt: bytes, content: str) -> bytes:
    """SHA-256(salt ‖ UTF-8 content)."""
    return hashlib.sha256(salt + content.encode("utf-8")).digest()


def record_bytes(
    *,
    stream_id: str,
    seq: int,
    kind: RecordKind,
    source_agent_id: str,
    written_by: str,
    subject_agent_id: str,
    role: Role,
    target_seq: int,
    content_hash: bytes,
    tags: Sequence[str],
    metadata_json: str,
    created_at: int,
    idempotency_key: str,
    occurred_at: int | None = None,
) -> bytes:
    """The canonical bytes of a record without its hashes (docs/log-format.md §2): domain v1
    without `occurred_at`, v2 with it appended."""
    return b"".join(
        (
            _str(RECORD_DOMAIN if occurred_at is None else RECORD_DOMAIN_OCCURRED),
            _str(stream_id),
            _U64.pack(seq),
            _U8.pack(int(kind)),
            _str(source_agent_id),
            _str(written_by),
            _str(subject_agent_id),
            _U8.pack(int(role)),
            _U64.pack(target_seq),
            _bytes32(content_hash),
            _strs(tags),
            _str(metadata_json),
            _I64.pack(created_at),
            _str(idempotency_key),
            b"" if occurred_at is None else _I64.pack(occurred_at),
        )
    )


def canonical_of(record: Record) -> bytes:
    """The canonical bytes of a stored record (its hashes are not part of them)."""
    return record_bytes(
        stream_id=record.stream_id,
        seq=record.seq,
        kind=record.kind,
        source_agent_id=record.source_agent_id,
        written_by=record.written_by,
        subject_agent_id=record.subject_agent_id,
        role=record.role,
        target_seq=record.target_seq,
        content_hash=record.content_hash,
        tags=record.tags,
        metadata_json=record.metadata_json,
        created_at=record.created_at,
        idempotency_key=record.idempotency_key,
        occurred_at=record.occurred_at,
    )


def leaf_hash(canonical: bytes) -> bytes:
    """SHA-256(0x00 ‖ canonical bytes): the record's Merkle leaf."""
    return hashlib.sha256(LEAF_PREFIX + canonical).digest()


def chain_next(previous: bytes, leaf: bytes) -> bytes:
    """chain_hash[n] = SHA-256(chain_hash[n-1] ‖ leaf_hash[n])."""
    return hashlib.sha256(previous + leaf).digest()


def genesis(tenant: str, stream_id: str, kind: StreamKind, created_at: int) -> bytes:
    """chain_hash[0] of a stream, bound to its tenant, id, kind and creation time."""
    return hashlib.sha256(
        _str(GENESIS_DOMAIN)
        + _str(tenant)
        + _str(stream_id)
        + _U8.pack(int(kind))
        + _I64.pack(created_at)
    ).digest()


def seal(
    draft: Draft, stream_id: str, seq: int, created_at: int, salt: bytes, previous: bytes
) -> Record:
    """Turns a draft into a record at `seq`, with its content hash, leaf and chain hash."""
    if len(salt) != SALT_BYTES:
        raise ValueError(f"a salt is {SALT_BYTES} bytes, got {len(salt)}")
    digest = content_hash(salt, draft.content)
    leaf = leaf_hash(
        record_bytes(
            stream_id=stream_id,
            seq=seq,
            kind=draft.kind,
            source_agent_id=draft.source_agent_id,
            written_by=draft.written_by,
            subject_agent_id=draft.subject_agent_id,
            role=draft.role,
            target_seq=draft.target_seq,
            content_hash=digest,
            tags=draft.tags,
            metadata_json=draft.metadata_json,
            created_at=created_at,
            idempotency_key=draft.idempotency_key,
            occurred_at=draft.occurred_at,
        )
    )
    return Record(
        stream_id=stream_id,
        seq=seq,
        kind=draft.kind,
        source_agent_id=draft.source_agent_id,
        written_by=draft.written_by,
        subject_agent_id=draft.subject_agent_id,
        role=draft.role,
        target_seq=draft.target_seq,
        content=draft.content,
        salt=salt,
        content_hash=digest,
        tags=draft.tags,
        metadata_json=draft.metadata_json,
        created_at=created_at,
        idempotency_key=draft.idempotency_key,
        leaf_hash=leaf,
        chain_hash=chain_next(previous, leaf),
        occurred_at=draft.occurred_at,
    )


def checkpoint_bytes(
    tenant: str, stream_id: str, size: int, root: bytes, head: bytes, time: int
) -> bytes:
    """The bytes a checkpoint signature covers (docs/log-format.md §5)."""
    return (
        _str(CHECKPOINT_DOMAIN)
        + _str(tenant)
        + _str(stream_id)
        + _U64.pack(size)
        + _bytes32(root)
        + _bytes32(head)
        + _I64.pack(time)
    )
