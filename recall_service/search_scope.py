"""Which streams a search may look in: the recall access rules, applied before any index is
touched, so no lane ever sees a stream the caller may not read.

Named streams are checked exactly as `Read` checks them (another tenant's stream is
NOT_FOUND, a stream the caller may not read is PERMISSION_DENIED). With none named, the scope
is every stream the caller may read now: an agent key's current memberships (a detached agent
has none in that stream), admin and service keys every stream of their tenant.
"""

from __future__ import annotations

from dataclasses import dataclass

from cairn_server.auth import Principal
from cairn_server.errors import FailedPrecondition, InvalidArgument
from recall_service import acl
from recall_service.core import Deps
from recall_service.models import Stream
from recall_service.reads import readable_streams
from recall_service.search_query import SearchQuery
from recall_service.store.base import LogReader

MAX_DEFAULT_STREAMS = 1000
_PAGE = 500


@dataclass(frozen=True, slots=True)
class Scope:
    """The streams to search, as read from the log, and the seq to wait for in each."""

    streams: tuple[Stream, ...]
    wanted: dict[Stream, int]


def resolve(deps: Deps, principal: Principal, query: SearchQuery) -> Scope:
    """The streams `principal` may search for `query`, and its `min_seq` checked against
    them."""
    reader = deps.store.reader()
    if query.stream_ids:
        streams = readable_streams(deps, principal, list(dict.fromkeys(query.stream_ids)), reader)
    else:
        streams = _all_readable(reader, principal)
    by_id = {s.id: s for s in streams}
    wanted: dict[Stream, int] = {}
    for stream_id, seq in query.min_seq.items():
        stream = by_id.get(stream_id)
        if stream is None:
            raise InvalidArgument(
                f"min_seq[{stream_id}]", "names a stream this search does not look in"
            )
        if seq > stream.size:
            raise InvalidArgument(
                f"min_seq[{stream_id}]",
                f"the stream has {stream.size} records; {seq} is beyond its end",
            )
        wanted[stream] = seq
    return Scope(tuple(streams), wanted)


def _all_readable(reader: LogReader, principal: Principal) -> list[Stream]:
    agent = acl.agent_of(principal)
    streams: list[Stream] = []
    after = 0
    while True:
        page = reader.list_streams(
            principal.tenant, after=after, limit=_PAGE, kind=None, agent=agent
        )
        streams.extend(s for _, s in page)
        if len(streams) > MAX_DEFAULT_STREAMS:
            raise FailedPrecondition(
                f"{principal.describe()} may read more than {MAX_DEFAULT_STREAMS} streams; "
                "name the streams to search in stream_ids"
            )
        if len(page) < _PAGE:
            return streams
        after = page[-1][0]
