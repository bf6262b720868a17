"""Writing messages: one, or a batch atomically, with idempotency keys."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from cairn_server.auth import Principal
from cairn_server.errors import AlreadyExists, InvalidArgument
from recall_service import acl, validation
from recall_service.append import append_drafts
from recall_service.canonical import content_hash
from recall_service.core import Deps, stream_not_found
from recall_service.models import Appended, Draft, Record, RecordKind


@dataclass(frozen=True, slots=True)
class Entry:
    """One message as the client sent it."""

    content: str
    source_agent_id: str = ""
    tags: tuple[str, ...] = ()
    metadata_json: str = ""
    idempotency_key: str = ""
    vector: tuple[float, ...] = ()
    occurred_at: int | None = None  # µs: when it was said, if not now


def vector_of(deps: Deps, entry: Entry, field: str) -> bytes | None:
    """The entry's client-supplied vector, checked and normalised, as float32 bytes (None
    when it has none). Refused on a server that embeds content itself."""
    if not entry.vector:
        return None
    if deps.client_vectors is None:
        raise InvalidArgument(
            field,
            "this server embeds content itself and takes no vectors from clients "
            "(send none, or run it with --embedder client)",
        )
    row = deps.client_vectors.check([entry.vector], field)[0]
    return bytes(row.astype("<f4").tobytes())


def draft_of(deps: Deps, principal: Principal, entry: Entry, field: str) -> Draft:
    """Validates an entry and turns it into a MESSAGE draft (authorship not yet checked)."""
    prefix = f"{field}." if field else ""
    source = acl.source_of(principal, entry.source_agent_id, f"{prefix}source_agent_id")
    validation.check_id(f"{prefix}source_agent_id", source, "an agent")
    validation.check_content(f"{prefix}content", entry.content, deps.max_content_bytes)
    tags = validation.normalise_tags(f"{prefix}tags", entry.tags)
    metadata = validation.canonical_metadata(f"{prefix}metadata_json", entry.metadata_json)
    validation.check_idempotency_key(f"{prefix}idempotency_key", entry.idempotency_key)
    if entry.occurred_at is not None:
        validation.check_occurred_at(f"{prefix}occurred_at", entry.occurred_at, deps.clock())
    return Draft(
        kind=RecordKind.MESSAGE,
        source_agent_id=source,
        written_by=acl.written_by(principal),
        content=entry.content,
        tags=tags,
        metadata_json=metadata,
        idempotency_key=entry.idempotency_key,
        occurred_at=entry.occurred_at,
    )


def same_write(draft: Draft, record: Record) -> bool:
    """True when `record` is what `draft` would have written (a genuine retry)."""
    if (
        record.kind is not RecordKind.MESSAGE
        or record.source_agent_id != draft.source_agent_id
        or record.written_by != draft.written_by
        or record.tags != draft.tags
        or record.metadata_json != draft.metadata_json
        or record.occurred_at != draft.occurred_at
    ):
        return False
    if record.salt is None:  # redacted since: the content can no longer be compared
        return True
    return content_hash(record.salt, draft.content) == record.content_hash


def write(
    deps: Deps, principal: Principal, stream_id: str, entries: Sequence[Entry], *, batch: bool
) -> Appended:
    """Appends messages atomically, in order. Entries whose idempotency key was used before
    on the stream return their first record, and nothing is written for them."""
    if batch and not entries:
        raise InvalidArgument("entries", "must hold at least one entry")
    if len(entries) > validation.MAX_BATCH:
        raise InvalidArgument(
            "entries", f"at most {validation.MAX_BATCH} entries, got {len(entries)}"
        )
    drafts = [
        draft_of(deps, principal, e, f"entries[{i}]" if batch else "entry")
        for i, e in enumerate(entries)
    ]
    vectors = [
        vector_of(deps, e, f"entries[{i}].vector" if batch else "entry.vector")
        for i, e in enumerate(entries)
    ]
    seen: dict[str, int] = {}
    for i, draft in enumerate(drafts):
        key = draft.idempotency_key
        if key and key in seen:
            raise InvalidArgument(
                f"entries[{i}].idempotency_key", f"{key!r} is used by entries[{seen[key]}] too"
            )
        seen[key] = i
    with deps.store.append(principal.tenant, stream_id) as (tx, stream):
        if stream is None:
            raise stream_not_found(stream_id)
        caller = acl.agent_of(principal)
        sources = [d.source_agent_id for d in drafts]
        found = tx.participants(stream, [*sources, *([caller] if caller else [])])
        own = found.get(caller) if caller else None
        for source in dict.fromkeys(sources):
            acl.require_write(principal, stream, own, source, found.get(source))
        earlier = tx.by_idempotency_keys(stream, [d.idempotency_key for d in drafts])
        fresh: list[Draft] = []
        fresh_vectors: list[bytes | None] = []
        for i, draft in enumerate(drafts):
            first = earlier.get(draft.idempotency_key) if draft.idempotency_key else None
            if first is None:
                fresh.append(draft)
                fresh_vectors.append(vectors[i])
            elif not same_write(draft, first):
                field = f"entries[{i}]" if batch else "entry"
                raise AlreadyExists(
                    f"{field}.idempotency_key {draft.idempotency_key!r} was used on stream "
                    f"'{stream.id}' for a different write (seq {first.seq})"
                )
        if fresh:
            updated, records, checkpoint = append_drafts(deps, tx, stream, fresh)
            tx.put_vectors(
                stream,
                [(r.seq, v) for r, v in zip(records, fresh_vectors, strict=True) if v is not None],
            )
        else:
            updated, records = stream, []
            latest = tx.latest_checkpoint(stream)
            assert latest is not None, "every stream has a checkpoint from its creation"
            checkpoint = latest
    appended = iter(records)
    result: list[Record] = []
    replayed: list[bool] = []
    for draft in drafts:
        first = earlier.get(draft.idempotency_key) if draft.idempotency_key else None
        result.append(first if first is not None else next(appended))
        replayed.append(first is not None)
    return Appended(updated, result, checkpoint, replayed)
