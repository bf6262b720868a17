"""Protobuf <-> domain conversions for the recall service. Only the servicer uses this module.

The domain enums carry the protobuf enum numbers, so conversions are by value.
"""

from __future__ import annotations

from google.protobuf import timestamp_pb2

from cairn.v1 import recall_pb2
from cairn_server.errors import InvalidArgument
from recall_service.models import Checkpoint, Participant, Record, Role, Stream, StreamKind
from recall_service.search_query import Hit, SearchMode, SearchQuery
from recall_service.store.base import RecordQuery
from recall_service.writes import Entry


def timestamp(micros: int) -> timestamp_pb2.Timestamp:
    """A Timestamp from integer microseconds (exact)."""
    return timestamp_pb2.Timestamp(seconds=micros // 1_000_000, nanos=(micros % 1_000_000) * 1000)


def micros(ts: timestamp_pb2.Timestamp) -> int:
    """Integer microseconds from a Timestamp (sub-microsecond digits dropped)."""
    return ts.seconds * 1_000_000 + ts.nanos // 1000


def stream_kind(field: str, value: int) -> StreamKind:
    """A required stream kind."""
    try:
        return StreamKind(value)
    except ValueError:
        raise InvalidArgument(
            field, "must be STREAM_KIND_CONVERSATION, STREAM_KIND_ARCHIVAL or STREAM_KIND_MESSAGES"
        ) from None


def optional_kind(value: int) -> StreamKind | None:
    """A stream-kind filter: unspecified means any."""
    return None if value == recall_pb2.STREAM_KIND_UNSPECIFIED else stream_kind("kind", value)


def role(field: str, value: int) -> Role:
    """A required participant role."""
    if value not in (Role.READER, Role.WRITER, Role.OWNER):
        raise InvalidArgument(
            field,
            "must be PARTICIPANT_ROLE_READER, PARTICIPANT_ROLE_WRITER or PARTICIPANT_ROLE_OWNER",
        )
    return Role(value)


def stream_to_pb(stream: Stream) -> recall_pb2.Stream:
    """A stream for the wire."""
    return recall_pb2.Stream(
        id=stream.id,
        kind=int(stream.kind),  # type: ignore[arg-type]
        created_by=stream.created_by,
        created_at=timestamp(stream.created_at),
        size=stream.size,
        chain_head=stream.head,
        root=stream.root,
        genesis=stream.genesis,
        tenant=stream.tenant,
    )


def record_to_pb(record: Record) -> recall_pb2.Record:
    """A record for the wire, with everything a client needs to recompute its hashes."""
    pb = recall_pb2.Record(
        stream_id=record.stream_id,
        seq=record.seq,
        kind=int(record.kind),  # type: ignore[arg-type]
        source_agent_id=record.source_agent_id,
        written_by=record.written_by,
        content=record.content or "",
        tags=record.tags,
        metadata_json=record.metadata_json,
        created_at=timestamp(record.created_at),
        idempotency_key=record.idempotency_key,
        content_hash=record.content_hash,
        salt=record.salt or b"",
        leaf_hash=record.leaf_hash,
        chain_hash=record.chain_hash,
        subject_agent_id=record.subject_agent_id,
        role=int(record.role),  # type: ignore[arg-type]
        target_seq=record.target_seq,
        redacted=record.redacted,
        redacted_by_seq=record.redacted_by,
    )
    if record.occurred_at is not None:
        pb.occurred_at.CopyFrom(timestamp(record.occurred_at))
    return pb


def participant_to_pb(participant: Participant) -> recall_pb2.Participant:
    """A participant for the wire."""
    return recall_pb2.Participant(
        agent_id=participant.agent_id,
        role=int(participant.role),  # type: ignore[arg-type]
        attached_seq=participant.attached_seq,
        attached_at=timestamp(participant.attached_at),
    )


def checkpoint_to_pb(checkpoint: Checkpoint) -> recall_pb2.Checkpoint:
    """A signed checkpoint for the wire."""
    return recall_pb2.Checkpoint(
        tenant=checkpoint.tenant,
        stream_id=checkpoint.stream_id,
        size=checkpoint.size,
        root=checkpoint.root,
        chain_head=checkpoint.head,
        time=timestamp(checkpoint.time),
        key_id=checkpoint.key_id,
        signature=checkpoint.signature,
    )


def checkpoint_from_pb(field: str, pb: recall_pb2.Checkpoint) -> Checkpoint:
    """A checkpoint a client sent back."""
    if len(pb.root) != 32 or len(pb.chain_head) != 32:
        raise InvalidArgument(field, "root and chain_head must be 32 bytes each")
    if pb.size < 0:
        raise InvalidArgument(field, f"size must not be negative, got {pb.size}")
    return Checkpoint(
        tenant=pb.tenant,
        stream_id=pb.stream_id,
        size=pb.size,
        root=pb.root,
        head=pb.chain_head,
        time=micros(pb.time),
        key_id=pb.key_id,
        signature=pb.signature,
    )


def entry_from_pb(pb: recall_pb2.WriteEntry) -> Entry:
    """A write entry as the domain takes it."""
    return Entry(
        content=pb.content,
        source_agent_id=pb.source_agent_id,
        tags=tuple(pb.tags),
        metadata_json=pb.metadata_json,
        idempotency_key=pb.idempotency_key,
        vector=tuple(pb.vector),
        occurred_at=micros(pb.occurred_at) if pb.HasField("occurred_at") else None,
    )


def query_from_pb(request: recall_pb2.ReadRequest) -> RecordQuery:
    """The filters of a Read."""
    has_range = request.HasField("time_range")
    start = end = None
    if has_range and request.time_range.HasField("start"):
        start = micros(request.time_range.start)
    if has_range and request.time_range.HasField("end"):
        end = micros(request.time_range.end)
    return RecordQuery(
        authors=tuple(request.source_agent_ids),
        first_seq=request.seqs.first,
        last_seq=request.seqs.last,
        start=start,
        end=end,
        tags=tuple(request.tags),
        match_all_tags=request.match_all_tags,
        include_events=request.include_events,
        newest_first=request.newest_first,
    )


def search_mode(value: int) -> SearchMode:
    """A search mode; unspecified means HYBRID."""
    if value == recall_pb2.SEARCH_MODE_UNSPECIFIED:
        return SearchMode.HYBRID
    try:
        return SearchMode(value)
    except ValueError:
        raise InvalidArgument(
            "mode", "must be SEARCH_MODE_HYBRID, SEARCH_MODE_LEXICAL or SEARCH_MODE_VECTOR"
        ) from None


def search_query_from_pb(request: recall_pb2.SearchRequest) -> SearchQuery:
    """A search as the domain takes it."""
    flt = request.filter
    start = end = None
    if flt.HasField("time_range"):
        if flt.time_range.HasField("start"):
            start = micros(flt.time_range.start)
        if flt.time_range.HasField("end"):
            end = micros(flt.time_range.end)
    return SearchQuery(
        text=request.query,
        stream_ids=tuple(request.stream_ids),
        mode=search_mode(request.mode),
        authors=tuple(flt.source_agent_ids),
        start=start,
        end=end,
        tags_any=tuple(flt.tags_any),
        tags_all=tuple(flt.tags_all),
        min_seq=dict(request.min_seq),
        top_k=request.top_k,
        query_vector=tuple(request.query_vector),
    )


def hit_to_pb(hit: Hit) -> recall_pb2.SearchHit:
    """A search hit for the wire; a lane's rank is absent when that lane missed the record."""
    return recall_pb2.SearchHit(
        record=record_to_pb(hit.record),
        score=hit.score,
        lexical_rank=hit.lexical_rank,
        vector_rank=hit.vector_rank,
        conflicts_with=[
            recall_pb2.RecordRef(stream_id=stream_id, seq=seq)
            for stream_id, seq in hit.conflicts_with
        ],
    )
