"""What the recall service returns and takes, as plain frozen dataclasses.

Hashes, roots and signatures are `bytes`; proofs are `list[bytes]` in RFC 6962 order. To check
what the server sent with `cairn.verify`, which works on the wire format, pass
`record.to_proto()` and `checkpoint.to_proto()`: the conversion is exact, byte for byte.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from cairn.enums import ParticipantRole, RecordKind, StreamKind
from cairn.protobuf_values import PARTICIPANT_ROLE, RECORD_KIND, json_object, to_timestamp
from cairn.v1 import recall_pb2

__all__ = [
    "Appended",
    "Attached",
    "Checkpoint",
    "ConsistencyProof",
    "CreatedStream",
    "InclusionProof",
    "OverlappingPair",
    "Participant",
    "PublicKey",
    "Record",
    "RecordRef",
    "SearchHit",
    "SearchMode",
    "Stream",
    "Verification",
    "WriteEntry",
    "Written",
    "WrittenBatch",
]


@dataclass(frozen=True, slots=True)
class Stream:
    """One append-only log with its size, chain head and Merkle root."""

    id: str
    kind: StreamKind
    created_by: str
    created_at: datetime
    size: int
    chain_head: bytes
    root: bytes
    genesis: bytes
    tenant: str


@dataclass(frozen=True, slots=True)
class Record:
    """One entry of a stream's log. `source_agent_id` is the participant it speaks for,
    `written_by` the authenticated principal that wrote it; `metadata_json` is kept as the
    server stored it (it is hashed), `metadata` parses it."""

    stream_id: str
    seq: int
    kind: RecordKind
    source_agent_id: str
    written_by: str
    content: str
    tags: tuple[str, ...]
    metadata_json: str
    created_at: datetime
    idempotency_key: str
    content_hash: bytes
    salt: bytes
    leaf_hash: bytes
    chain_hash: bytes
    subject_agent_id: str
    role: ParticipantRole
    target_seq: int
    redacted: bool
    redacted_by_seq: int
    # When the message was said, as its writer gave it; None when not given (then
    # `created_at`, the server's time of the write, is that time).
    occurred_at: datetime | None = None

    @property
    def metadata(self) -> dict[str, Any]:
        """The metadata as a dict."""
        return json_object(self.metadata_json)

    def to_proto(self) -> recall_pb2.Record:
        """The record in its wire form, for `cairn.verify`."""
        pb = recall_pb2.Record(
            stream_id=self.stream_id,
            seq=self.seq,
            kind=RECORD_KIND.encode(self.kind),
            source_agent_id=self.source_agent_id,
            written_by=self.written_by,
            content=self.content,
            tags=list(self.tags),
            metadata_json=self.metadata_json,
            created_at=to_timestamp(self.created_at),
            idempotency_key=self.idempotency_key,
            content_hash=self.content_hash,
            salt=self.salt,
            leaf_hash=self.leaf_hash,
            chain_hash=self.chain_hash,
            subject_agent_id=self.subject_agent_id,
            role=PARTICIPANT_ROLE.encode(self.role),
            target_seq=self.target_seq,
            redacted=self.redacted,
            redacted_by_seq=self.redacted_by_seq,
        )
        if self.occurred_at is not None:
            pb.occurred_at.CopyFrom(to_timestamp(self.occurred_at))
        return pb


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """A signed statement of a stream's state (size, Merkle root, chain head, time). Keep
    one to detect later truncation or rewritten history."""

    tenant: str
    stream_id: str
    size: int
    root: bytes
    chain_head: bytes
    time: datetime
    key_id: str
    signature: bytes

    def to_proto(self) -> recall_pb2.Checkpoint:
        """The checkpoint in its wire form, for `cairn.verify`."""
        return recall_pb2.Checkpoint(
            tenant=self.tenant,
            stream_id=self.stream_id,
            size=self.size,
            root=self.root,
            chain_head=self.chain_head,
            time=to_timestamp(self.time),
            key_id=self.key_id,
            signature=self.signature,
        )


@dataclass(frozen=True, slots=True)
class Participant:
    """An agent attached to a stream, and the ATTACH record that gave its current role."""

    agent_id: str
    role: ParticipantRole
    attached_seq: int
    attached_at: datetime


@dataclass(frozen=True, slots=True)
class WriteEntry:
    """One message to append with `write_batch`. Give every entry an `idempotency_key` and
    the batch is retried safely when the server is unreachable."""

    content: str
    source_agent_id: str = ""
    tags: tuple[str, ...] = ()
    metadata: dict[str, Any] | None = None
    idempotency_key: str = ""
    # The content's embedding, only for a server run with `--embedder client`.
    vector: tuple[float, ...] = ()
    # When it was said, if not now (history written after the fact): timezone-aware, not
    # later than the server's time.
    occurred_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class CreatedStream:
    """A new stream, its owner's ATTACH record (when it has an owner) and a checkpoint."""

    stream: Stream
    owner_attach: Record | None
    checkpoint: Checkpoint | None


@dataclass(frozen=True, slots=True)
class Attached:
    """The participant after an attach; `record` is None when it held the role already."""

    participant: Participant
    record: Record | None
    checkpoint: Checkpoint | None


@dataclass(frozen=True, slots=True)
class Appended:
    """The record an operation appended (a DETACH or REDACTION) and a checkpoint over it."""

    record: Record
    checkpoint: Checkpoint | None


@dataclass(frozen=True, slots=True)
class Written:
    """The record a write appended and a signed checkpoint covering it; `replayed` when the
    idempotency key matched an earlier write and nothing new was written."""

    record: Record
    checkpoint: Checkpoint | None
    replayed: bool


@dataclass(frozen=True, slots=True)
class WrittenBatch:
    """One record per entry, in order, and a checkpoint covering them."""

    records: tuple[Record, ...]
    checkpoint: Checkpoint | None


@dataclass(frozen=True, slots=True)
class OverlappingPair:
    """Two messages by different authors written `seconds_apart` from each other."""

    earlier: Record
    later: Record
    seconds_apart: float


@dataclass(frozen=True, slots=True)
class Verification:
    """The server's recomputation of a stream. When `ok` is False, `first_bad_seq` and
    `reason` say what failed."""

    ok: bool
    size: int
    chain_head: bytes
    root: bytes
    first_bad_seq: int
    reason: str
    checkpoints_checked: int


@dataclass(frozen=True, slots=True)
class InclusionProof:
    """An RFC 6962 proof that leaf `leaf_index` (seq - 1) is in the tree of `tree_size`
    leaves with head `root`: check it with `cairn.verify.verify_inclusion(proof.leaf_hash,
    proof.leaf_index, proof.tree_size, proof.proof, checkpoint.root)`."""

    leaf_index: int
    tree_size: int
    leaf_hash: bytes
    proof: list[bytes]
    root: bytes
    checkpoint: Checkpoint | None


@dataclass(frozen=True, slots=True)
class ConsistencyProof:
    """An RFC 6962 proof that the tree of `to_size` leaves extends that of `from_size`."""

    from_size: int
    to_size: int
    proof: list[bytes]
    from_root: bytes
    to_root: bytes


@dataclass(frozen=True, slots=True)
class PublicKey:
    """The key that signs checkpoints (raw 32-byte Ed25519); pin it."""

    algorithm: str
    public_key: bytes
    key_id: str


class SearchMode(StrEnum):
    """Which indexes answer a search: both fused (the default), BM25 alone, vectors alone."""

    HYBRID = "hybrid"
    LEXICAL = "lexical"
    VECTOR = "vector"


@dataclass(frozen=True, slots=True)
class RecordRef:
    """One record, by stream and seq."""

    stream_id: str
    seq: int


@dataclass(frozen=True, slots=True)
class SearchHit:
    """A record a search found: its fused score (the lane's own score in a one-lane mode),
    its 1-based rank in each lane (None when that lane did not return it), and the hits by
    other authors it conflicts with."""

    record: Record
    score: float
    lexical_rank: int | None
    vector_rank: int | None
    conflicts_with: tuple[RecordRef, ...]


class SearchResults(list[SearchHit]):
    """A search's hits, best first: a list, plus `vector_lane_skipped` — True when a hybrid
    search was answered from the lexical lane alone because the server's embedded vector
    index was building its search graph (search again shortly for the fused answer)."""

    def __init__(self, hits: Iterable[SearchHit] = (), vector_lane_skipped: bool = False) -> None:
        super().__init__(hits)
        self.vector_lane_skipped = vector_lane_skipped
