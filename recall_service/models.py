"""Domain types of the recall log: plain dataclasses, no protobuf, no SQL.

The enum values are the numbers of the canonical encoding (docs/log-format.md) and of the
protobuf enums, so the three never disagree.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum


class StreamKind(IntEnum):
    """What a stream holds."""

    CONVERSATION = 1
    ARCHIVAL = 2
    MESSAGES = 3


class Role(IntEnum):
    """A participant's role; higher includes lower."""

    NONE = 0
    READER = 1
    WRITER = 2
    OWNER = 3


class RecordKind(IntEnum):
    """What a record is."""

    MESSAGE = 1
    ATTACH = 2
    DETACH = 3
    REDACTION = 4


EVENT_KINDS = frozenset({RecordKind.ATTACH, RecordKind.DETACH, RecordKind.REDACTION})


@dataclass(frozen=True, slots=True)
class Stream:
    """One append-only log and its current head. `key` is the store's internal row key."""

    key: int
    tenant: str
    id: str
    kind: StreamKind
    created_by: str
    created_at: int
    genesis: bytes
    size: int
    head: bytes
    root: bytes
    last_time: int
    frontier: tuple[bytes, ...] = ()  # the Merkle tree's peaks, left to right


@dataclass(frozen=True, slots=True)
class Record:
    """One stored record. `content` and `salt` are None once redacted; times are µs."""

    stream_id: str
    seq: int
    kind: RecordKind
    source_agent_id: str
    written_by: str
    subject_agent_id: str
    role: Role
    target_seq: int
    content: str | None
    salt: bytes | None
    content_hash: bytes
    tags: tuple[str, ...]
    metadata_json: str
    created_at: int
    idempotency_key: str
    leaf_hash: bytes
    chain_hash: bytes
    redacted_by: int = 0
    occurred_at: int | None = None  # when it was said, as its writer gave it (µs)

    @property
    def said_at(self) -> int:
        """When the message was said: `occurred_at` when the writer gave it, else the
        server's time of the write."""
        return self.created_at if self.occurred_at is None else self.occurred_at

    @property
    def redacted(self) -> bool:
        """True when the content and salt were erased."""
        return self.content is None


@dataclass(frozen=True, slots=True)
class Draft:
    """A record before sealing: everything the writer decides, nothing the log computes."""

    kind: RecordKind
    source_agent_id: str
    written_by: str
    content: str
    tags: tuple[str, ...] = ()
    metadata_json: str = "{}"
    idempotency_key: str = ""
    subject_agent_id: str = ""
    role: Role = Role.NONE
    target_seq: int = 0
    occurred_at: int | None = None


@dataclass(frozen=True, slots=True)
class Participant:
    """An agent's membership of a stream; `detached_seq` is 0 while attached."""

    agent_id: str
    role: Role
    attached_seq: int
    attached_at: int
    detached_seq: int = 0

    @property
    def active(self) -> bool:
        """True while attached."""
        return self.detached_seq == 0


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """A signed statement of a stream's state at `size` (time in µs)."""

    tenant: str
    stream_id: str
    size: int
    root: bytes
    head: bytes
    time: int
    key_id: str
    signature: bytes


@dataclass(frozen=True, slots=True)
class Appended:
    """What one append transaction produced."""

    stream: Stream
    records: list[Record]
    checkpoint: Checkpoint
    replayed: list[bool] = field(default_factory=list)
