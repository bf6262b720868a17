"""Reading a stream in log order with filters, and finding overlapping writes."""

from __future__ import annotations

from collections.abc import Sequence

from cairn_server.auth import Principal
from cairn_server.errors import InvalidArgument
from cairn_server.paging import fingerprint, next_token, parse_page
from recall_service import acl, validation
from recall_service.core import Deps, stream_not_found
from recall_service.models import Record, Stream
from recall_service.store.base import LogReader, RecordQuery

# An overlapping pair's page key packs (later seq, earlier seq) into one integer.
_PAIR_SHIFT = 32


def readable(
    deps: Deps, principal: Principal, stream_id: str, reader: LogReader | None = None
) -> tuple[LogReader, Stream]:
    """The caller's reader (or `reader`) and the stream, once the caller may read it."""
    reader = reader if reader is not None else deps.store.reader()
    return reader, readable_streams(deps, principal, [stream_id], reader)[0]


def readable_streams(
    deps: Deps, principal: Principal, stream_ids: Sequence[str], reader: LogReader
) -> list[Stream]:
    """The named streams in the order named, once the caller may read every one (another
    tenant's or a missing stream is NOT_FOUND; see `acl.require_read`); the first that fails,
    in that order, decides. Two queries, however many streams."""
    found = reader.get_streams(principal.tenant, stream_ids)
    agent = acl.agent_of(principal)
    own = reader.memberships(list(found.values()), agent) if agent else {}
    streams = []
    for stream_id in stream_ids:
        stream = found.get(stream_id)
        if stream is None:
            raise stream_not_found(stream_id)
        acl.require_read(principal, stream, own.get(stream.key))
        streams.append(stream)
    return streams


def check_query(query: RecordQuery) -> None:
    """Ranges must not be reversed; tags and authors follow the write rules."""
    if query.first_seq < 0 or query.last_seq < 0:
        raise InvalidArgument("seqs", "seqs are 1 or more (0 leaves a bound open)")
    if query.first_seq and query.last_seq and query.first_seq > query.last_seq:
        raise InvalidArgument("seqs", f"first ({query.first_seq}) is after last ({query.last_seq})")
    if query.start is not None and query.end is not None and query.start > query.end:
        raise InvalidArgument("time_range", "start is after end")
    validation.normalise_tags("tags", query.tags)
    for i, author in enumerate(query.authors):
        validation.check_id(f"source_agent_ids[{i}]", author, "an agent")


def read(
    deps: Deps,
    principal: Principal,
    stream_id: str,
    query: RecordQuery,
    *,
    page_size: int,
    page_token: str,
) -> tuple[list[Record], str]:
    """A page of records in log order (or newest first) matching `query`."""
    check_query(query)
    reader, stream = readable(deps, principal, stream_id)
    key = fingerprint(
        "read",
        stream.id,
        sorted(query.authors),
        query.first_seq,
        query.last_seq,
        query.start,
        query.end,
        sorted(query.tags),
        query.match_all_tags,
        query.include_events,
        query.newest_first,
    )
    page = parse_page(page_size, page_token, key)
    rows = reader.records(stream, query, after=page.after, limit=page.size + 1)
    return rows[: page.size], next_token([r.seq for r in rows], page, key)


def overlapping_writes(
    deps: Deps,
    principal: Principal,
    stream_id: str,
    within_seconds: float,
    *,
    page_size: int,
    page_token: str,
) -> tuple[list[tuple[Record, Record]], str]:
    """Pairs of messages by different authors written within `within_seconds` of each other,
    ordered by the later record's seq, then the earlier's."""
    validation.check_window("within_seconds", within_seconds)
    reader, stream = readable(deps, principal, stream_id)
    key = fingerprint("overlap", stream.id, within_seconds)
    page = parse_page(page_size, page_token, key)
    after = (page.after >> _PAIR_SHIFT, page.after & ((1 << _PAIR_SHIFT) - 1))
    pairs = reader.overlapping(
        stream, round(within_seconds * 1_000_000), after=after, limit=page.size + 1
    )
    keys = [(later.seq << _PAIR_SHIFT) | earlier.seq for earlier, later in pairs]
    return pairs[: page.size], next_token(keys, page, key)
