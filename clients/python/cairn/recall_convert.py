"""Recall service messages to and from the plain types of `cairn.recall_types`."""

from __future__ import annotations

from cairn.protobuf_values import (
    PARTICIPANT_ROLE,
    RECORD_KIND,
    STREAM_KIND,
    from_timestamp,
    json_text,
    optional_timestamp,
    to_timestamp,
)
from cairn.recall_types import (
    Checkpoint,
    ConsistencyProof,
    InclusionProof,
    OverlappingPair,
    Participant,
    PublicKey,
    Record,
    RecordRef,
    SearchHit,
    SearchResults,
    Stream,
    Verification,
    WriteEntry,
)
from cairn.v1 import recall_pb2

# --- from the wire --------------------------------------------------------------------------


def stream(pb: recall_pb2.Stream) -> Stream:
    """A Stream."""
    return Stream(
        id=pb.id,
        kind=STREAM_KIND.decode(pb.kind),
        created_by=pb.created_by,
        created_at=from_timestamp(pb.created_at),
        size=pb.size,
        chain_head=pb.chain_head,
        root=pb.root,
        genesis=pb.genesis,
        tenant=pb.tenant,
    )


def record(pb: recall_pb2.Record) -> Record:
    """A Record (`to_proto` gives back the same bytes)."""
    return Record(
        stream_id=pb.stream_id,
        seq=pb.seq,
        kind=RECORD_KIND.decode(pb.kind),
        source_agent_id=pb.source_agent_id,
        written_by=pb.written_by,
        content=pb.content,
        tags=tuple(pb.tags),
        metadata_json=pb.metadata_json,
        created_at=from_timestamp(pb.created_at),
        idempotency_key=pb.idempotency_key,
        content_hash=pb.content_hash,
        salt=pb.salt,
        leaf_hash=pb.leaf_hash,
        chain_hash=pb.chain_hash,
        subject_agent_id=pb.subject_agent_id,
        role=PARTICIPANT_ROLE.decode(pb.role),
        target_seq=pb.target_seq,
        redacted=pb.redacted,
        redacted_by_seq=pb.redacted_by_seq,
        occurred_at=optional_timestamp(pb, "occurred_at"),
    )


def optional_record(parent: object, field: str) -> Record | None:
    """`parent.field` as a Record, or None when it is unset."""
    if not parent.HasField(field):  # type: ignore[attr-defined]
        return None
    return record(getattr(parent, field))


def checkpoint(pb: recall_pb2.Checkpoint) -> Checkpoint:
    """A Checkpoint."""
    return Checkpoint(
        tenant=pb.tenant,
        stream_id=pb.stream_id,
        size=pb.size,
        root=pb.root,
        chain_head=pb.chain_head,
        time=from_timestamp(pb.time),
        key_id=pb.key_id,
        signature=pb.signature,
    )


def optional_checkpoint(parent: object) -> Checkpoint | None:
    """`parent.checkpoint`, or None when it is unset."""
    if not parent.HasField("checkpoint"):  # type: ignore[attr-defined]
        return None
    return checkpoint(parent.checkpoint)  # type: ignore[attr-defined]


def participant(pb: recall_pb2.Participant) -> Participant:
    """A Participant."""
    return Participant(
        agent_id=pb.agent_id,
        role=PARTICIPANT_ROLE.decode(pb.role),
        attached_seq=pb.attached_seq,
        attached_at=from_timestamp(pb.attached_at),
    )


def overlapping_pair(pb: recall_pb2.OverlappingPair) -> OverlappingPair:
    """An OverlappingPair."""
    return OverlappingPair(
        earlier=record(pb.earlier), later=record(pb.later), seconds_apart=pb.seconds_apart
    )


def verification(pb: recall_pb2.VerifyStreamResponse) -> Verification:
    """A Verification."""
    return Verification(
        ok=pb.ok,
        size=pb.size,
        chain_head=pb.chain_head,
        root=pb.root,
        first_bad_seq=pb.first_bad_seq,
        reason=pb.reason,
        checkpoints_checked=pb.checkpoints_checked,
    )


def inclusion_proof(pb: recall_pb2.GetInclusionProofResponse) -> InclusionProof:
    """An InclusionProof."""
    return InclusionProof(
        leaf_index=pb.leaf_index,
        tree_size=pb.tree_size,
        leaf_hash=pb.leaf_hash,
        proof=list(pb.proof),
        root=pb.root,
        checkpoint=optional_checkpoint(pb),
    )


def consistency_proof(pb: recall_pb2.GetConsistencyProofResponse) -> ConsistencyProof:
    """A ConsistencyProof."""
    return ConsistencyProof(
        from_size=pb.from_size,
        to_size=pb.to_size,
        proof=list(pb.proof),
        from_root=pb.from_root,
        to_root=pb.to_root,
    )


def public_key(pb: recall_pb2.GetPublicKeyResponse) -> PublicKey:
    """A PublicKey."""
    return PublicKey(algorithm=pb.algorithm, public_key=pb.public_key, key_id=pb.key_id)


def search_results(pb: recall_pb2.SearchResponse) -> SearchResults:
    """The hits of a search, with whether the vector lane was skipped."""
    return SearchResults((search_hit(h) for h in pb.hits), pb.vector_lane_skipped)


def search_hit(pb: recall_pb2.SearchHit) -> SearchHit:
    """A SearchHit; a lane's rank is None when the lane did not return the record."""
    return SearchHit(
        record=record(pb.record),
        score=pb.score,
        lexical_rank=pb.lexical_rank if pb.HasField("lexical_rank") else None,
        vector_rank=pb.vector_rank if pb.HasField("vector_rank") else None,
        conflicts_with=tuple(RecordRef(r.stream_id, r.seq) for r in pb.conflicts_with),
    )


# --- to the wire ----------------------------------------------------------------------------


def write_entry_pb(entry: WriteEntry) -> recall_pb2.WriteEntry:
    """A WriteEntry with its metadata as JSON text."""
    return recall_pb2.WriteEntry(
        source_agent_id=entry.source_agent_id,
        content=entry.content,
        tags=list(entry.tags),
        metadata_json=json_text(entry.metadata),
        idempotency_key=entry.idempotency_key,
        vector=list(entry.vector),
        occurred_at=None if entry.occurred_at is None else to_timestamp(entry.occurred_at),
    )
