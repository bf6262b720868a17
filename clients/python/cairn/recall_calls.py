"""The recall service's methods on streams, participants and records (proofs and checkpoints
are in `proof_calls`).

Each function builds the call for the client method of the same name (`client.recall.<name>`)
and its docstring documents that method; `timeout` as in `agent_calls`. Every method naming a
stream raises NotFound when the caller's tenant has no such stream, and PermissionDenied when
the caller may not act on it. Reads, `attach` (attaching again writes nothing) and writes
that carry idempotency keys are retried when the server is unavailable.

A new RPC slots in as one more builder here (as `search` did, returning
`Call[SearchResults]`) and one line in each of `RecallClient` and `AsyncRecallClient`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from cairn import recall_convert as convert
from cairn.calls import DEFAULT_PAGE_SIZE, Call, Paged, paged
from cairn.enums import ParticipantRole, StreamKind
from cairn.protobuf_values import PARTICIPANT_ROLE, STREAM_KIND, to_timestamp
from cairn.recall_types import (
    Appended,
    Attached,
    CreatedStream,
    OverlappingPair,
    Participant,
    Record,
    SearchMode,
    SearchResults,
    Stream,
    WriteEntry,
    Written,
    WrittenBatch,
)
from cairn.v1 import common_pb2, recall_pb2

# --- streams --------------------------------------------------------------------------------


def create_stream(
    kind: StreamKind,
    *,
    stream_id: str = "",
    owner_agent_id: str = "",
    timeout: float | None = None,
) -> Call[CreatedStream]:
    """Creates a stream (with `stream_id`, or a server-assigned `stream-<uuid>`), whose
    first record attaches `owner_agent_id` as OWNER (an agent key owns what it creates).
    Raises InvalidArgument, AlreadyExists (the id is taken) or PermissionDenied."""
    return Call(
        "recall",
        "CreateStream",
        recall_pb2.CreateStreamRequest(
            stream_id=stream_id, kind=STREAM_KIND.encode(kind), owner_agent_id=owner_agent_id
        ),
        lambda r: CreatedStream(
            convert.stream(r.stream),
            convert.optional_record(r, "owner_attach"),
            convert.optional_checkpoint(r),
        ),
        idempotent=False,
        timeout=timeout,
    )


def get_stream(stream_id: str, *, timeout: float | None = None) -> Call[Stream]:
    """Returns a stream with its size, chain head and Merkle root."""
    return Call(
        "recall",
        "GetStream",
        recall_pb2.GetStreamRequest(stream_id=stream_id),
        lambda r: convert.stream(r.stream),
        idempotent=True,
        timeout=timeout,
    )


def list_streams(
    *,
    kind: StreamKind | None = None,
    page_size: int = DEFAULT_PAGE_SIZE,
    timeout: float | None = None,
) -> Paged[Stream]:
    """Iterates over the streams the caller sees (an agent key: those it is attached to), in
    creation order, only of `kind` when given."""
    number = STREAM_KIND.encode(StreamKind.UNSPECIFIED if kind is None else kind)
    return paged(
        "recall",
        "ListStreams",
        lambda token: recall_pb2.ListStreamsRequest(
            page_size=page_size, page_token=token, kind=number
        ),
        lambda r: [convert.stream(s) for s in r.streams],
        timeout,
    )


# --- participants ---------------------------------------------------------------------------


def attach(
    stream_id: str,
    agent_id: str,
    role: ParticipantRole = ParticipantRole.WRITER,
    *,
    timeout: float | None = None,
) -> Call[Attached]:
    """Attaches an agent with `role`, or changes its role, by appending an ATTACH record
    (none when it holds the role already). Needs an OWNER or admin key."""
    return Call(
        "recall",
        "Attach",
        recall_pb2.AttachRequest(
            stream_id=stream_id, agent_id=agent_id, role=PARTICIPANT_ROLE.encode(role)
        ),
        lambda r: Attached(
            convert.participant(r.participant),
            convert.optional_record(r, "record"),
            convert.optional_checkpoint(r),
        ),
        # Attaching with the role the agent holds writes nothing: a retry lands the same.
        idempotent=True,
        timeout=timeout,
    )


def detach(stream_id: str, agent_id: str, *, timeout: float | None = None) -> Call[Appended]:
    """Detaches an agent by appending a DETACH record: it reads and writes nothing more.
    Raises NotFound when the agent is not a participant. Needs an OWNER or admin key."""
    return Call(
        "recall",
        "Detach",
        recall_pb2.DetachRequest(stream_id=stream_id, agent_id=agent_id),
        lambda r: Appended(convert.record(r.record), convert.optional_checkpoint(r)),
        idempotent=False,
        timeout=timeout,
    )


def list_participants(
    stream_id: str,
    *,
    at_seq: int = 0,
    page_size: int = DEFAULT_PAGE_SIZE,
    timeout: float | None = None,
) -> Paged[Participant]:
    """Iterates over the participants now (or right after record `at_seq`) in the order
    their membership began."""
    return paged(
        "recall",
        "ListParticipants",
        lambda token: recall_pb2.ListParticipantsRequest(
            stream_id=stream_id, at_seq=at_seq, page_size=page_size, page_token=token
        ),
        lambda r: [convert.participant(p) for p in r.participants],
        timeout,
    )


# --- records --------------------------------------------------------------------------------


def write(
    stream_id: str,
    content: str,
    *,
    source_agent_id: str = "",
    tags: Sequence[str] = (),
    metadata: Mapping[str, Any] | None = None,
    idempotency_key: str = "",
    vector: Sequence[float] = (),
    occurred_at: datetime | None = None,
    timeout: float | None = None,
) -> Call[Written]:
    """Appends one message as the key's own agent, or as `source_agent_id` (an OWNER, admin
    or service key), and returns the record with a checkpoint covering it. With an
    `idempotency_key` the write is retried safely: a repeat returns the first record with
    `replayed` set. Raises InvalidArgument, PermissionDenied or AlreadyExists (the key was
    used for a different write). `vector` is the content's embedding, only for a server
    whose vectors come from clients (`--embedder client`). `occurred_at` is when the
    message was said, for history written after the fact (timezone-aware, not later than
    the server's time); the search indexes date it by that time."""
    entry = WriteEntry(
        content,
        source_agent_id,
        tuple(tags),
        _dict(metadata),
        idempotency_key,
        tuple(vector),
        occurred_at,
    )
    return Call(
        "recall",
        "Write",
        recall_pb2.WriteRequest(stream_id=stream_id, entry=convert.write_entry_pb(entry)),
        lambda r: Written(convert.record(r.record), convert.optional_checkpoint(r), r.replayed),
        idempotent=bool(idempotency_key),
        timeout=timeout,
    )


def write_batch(
    stream_id: str, entries: Sequence[WriteEntry], *, timeout: float | None = None
) -> Call[WrittenBatch]:
    """Appends up to 1000 messages atomically, in order, and returns one record per entry.
    Retried only when every entry has an idempotency key. Raises as `write` does, naming
    the entry (`entries[i].field`)."""
    return Call(
        "recall",
        "WriteBatch",
        recall_pb2.WriteBatchRequest(
            stream_id=stream_id, entries=[convert.write_entry_pb(e) for e in entries]
        ),
        lambda r: WrittenBatch(
            tuple(convert.record(x) for x in r.records), convert.optional_checkpoint(r)
        ),
        idempotent=bool(entries) and all(e.idempotency_key for e in entries),
        timeout=timeout,
    )


def read(
    stream_id: str,
    *,
    source_agent_ids: Sequence[str] = (),
    first_seq: int = 0,
    last_seq: int = 0,
    start: datetime | None = None,
    end: datetime | None = None,
    tags: Sequence[str] = (),
    match_all_tags: bool = False,
    include_events: bool = False,
    newest_first: bool = False,
    page_size: int = DEFAULT_PAGE_SIZE,
    timeout: float | None = None,
) -> Paged[Record]:
    """Iterates over records in log order (newest first with `newest_first`): messages only
    unless `include_events` (needed to verify a chain), filtered by author, by seqs
    [first_seq, last_seq] (0 leaves a bound open), by time [start, end) and by tags."""
    seqs = recall_pb2.SeqRange(first=first_seq, last=last_seq) if first_seq or last_seq else None
    time_range = (
        common_pb2.TimeRange(
            start=to_timestamp(start) if start else None, end=to_timestamp(end) if end else None
        )
        if start or end
        else None
    )
    return paged(
        "recall",
        "Read",
        lambda token: recall_pb2.ReadRequest(
            stream_id=stream_id,
            page_size=page_size,
            page_token=token,
            source_agent_ids=list(source_agent_ids),
            seqs=seqs,
            time_range=time_range,
            tags=list(tags),
            match_all_tags=match_all_tags,
            include_events=include_events,
            newest_first=newest_first,
        ),
        lambda r: [convert.record(x) for x in r.records],
        timeout,
    )


def overlapping_writes(
    stream_id: str,
    within_seconds: float,
    *,
    page_size: int = DEFAULT_PAGE_SIZE,
    timeout: float | None = None,
) -> Paged[OverlappingPair]:
    """Iterates over pairs of messages by different authors written within
    `within_seconds` (0 to 86400) of each other, ordered by the later record's seq."""
    return paged(
        "recall",
        "OverlappingWrites",
        lambda token: recall_pb2.OverlappingWritesRequest(
            stream_id=stream_id,
            within_seconds=within_seconds,
            page_size=page_size,
            page_token=token,
        ),
        lambda r: [convert.overlapping_pair(p) for p in r.pairs],
        timeout,
    )


def redact(
    stream_id: str, seq: int, *, reason: str = "", timeout: float | None = None
) -> Call[Appended]:
    """Erases a message's content and salt by appending a REDACTION record (the log still
    verifies). Raises InvalidArgument (no such seq) or FailedPrecondition (not a message, or
    redacted already). Needs an OWNER or admin key."""
    return Call(
        "recall",
        "Redact",
        recall_pb2.RedactRequest(stream_id=stream_id, seq=seq, reason=reason),
        lambda r: Appended(convert.record(r.record), convert.optional_checkpoint(r)),
        idempotent=False,
        timeout=timeout,
    )


_SEARCH_MODES = {
    SearchMode.HYBRID: recall_pb2.SEARCH_MODE_HYBRID,
    SearchMode.LEXICAL: recall_pb2.SEARCH_MODE_LEXICAL,
    SearchMode.VECTOR: recall_pb2.SEARCH_MODE_VECTOR,
}


def search(
    query: str,
    *,
    stream_ids: Sequence[str] = (),
    mode: SearchMode | str = SearchMode.HYBRID,
    source_agent_ids: Sequence[str] = (),
    start: datetime | None = None,
    end: datetime | None = None,
    tags_any: Sequence[str] = (),
    tags_all: Sequence[str] = (),
    min_seq: Mapping[str, int] | None = None,
    top_k: int = 10,
    query_vector: Sequence[float] = (),
    timeout: float | None = None,
) -> Call[SearchResults]:
    """Searches the messages of `stream_ids` (at most 100; none: every stream the caller may
    read) for `query`, best first, at most `top_k` (1-100) hits: BM25 and vectors fused
    (`mode` hybrid), or one of them. Filters: authors, time [start, end), tags (any / all).
    `min_seq` maps a stream id to a seq the search must see (the seq a write returned):
    the server waits until its indexes hold it, then raises Unavailable if they do not.
    `query_vector` only for a server whose vectors come from clients. Raises
    InvalidArgument, NotFound or PermissionDenied (a named stream), FailedPrecondition
    (none named and more than 1000 readable)."""
    time_range = (
        common_pb2.TimeRange(
            start=to_timestamp(start) if start else None, end=to_timestamp(end) if end else None
        )
        if start or end
        else None
    )
    return Call(
        "recall",
        "Search",
        recall_pb2.SearchRequest(
            query=query,
            stream_ids=list(stream_ids),
            mode=_SEARCH_MODES[SearchMode(mode)],
            filter=recall_pb2.SearchFilter(
                source_agent_ids=list(source_agent_ids),
                time_range=time_range,
                tags_any=list(tags_any),
                tags_all=list(tags_all),
            ),
            min_seq=dict(min_seq or {}),
            top_k=top_k,
            query_vector=list(query_vector),
        ),
        convert.search_results,
        idempotent=True,
        timeout=timeout,
    )


def _dict(metadata: Mapping[str, Any] | None) -> dict[str, Any] | None:
    return None if metadata is None else dict(metadata)
