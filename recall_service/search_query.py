"""What a search asks and what it returns, as plain dataclasses, and the checks on a query."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import IntEnum

from cairn_server.errors import InvalidArgument
from recall_service import validation
from recall_service.models import Record
from recall_service.projections.embedders import ClientVectors

MAX_QUERY_CHARS = 4096
MAX_TOP_K = 100
DEFAULT_TOP_K = 10
MAX_STREAMS = 100


class SearchMode(IntEnum):
    """Which projections answer; values are the protobuf enum's."""

    HYBRID = 1
    LEXICAL = 2
    VECTOR = 3


@dataclass(frozen=True, slots=True)
class SearchQuery:
    """One search. Times are µs, `start <= created_at < end`; `top_k` 0 means 10."""

    text: str
    stream_ids: tuple[str, ...] = ()
    mode: SearchMode = SearchMode.HYBRID
    authors: tuple[str, ...] = ()
    start: int | None = None
    end: int | None = None
    tags_any: tuple[str, ...] = ()
    tags_all: tuple[str, ...] = ()
    min_seq: Mapping[str, int] = field(default_factory=dict)
    top_k: int = 0
    query_vector: tuple[float, ...] = ()

    @property
    def limit(self) -> int:
        """How many hits to return."""
        return self.top_k or DEFAULT_TOP_K

    @property
    def lexical(self) -> bool:
        """True when the lexical lane takes part."""
        return self.mode in (SearchMode.HYBRID, SearchMode.LEXICAL)

    @property
    def vector(self) -> bool:
        """True when the vector lane takes part."""
        return self.mode in (SearchMode.HYBRID, SearchMode.VECTOR)


@dataclass(frozen=True, slots=True)
class Hit:
    """A record found: the fused score, its 1-based rank in each lane (None when that lane
    did not return it) and the records (stream id, seq) it conflicts with."""

    record: Record
    score: float
    lexical_rank: int | None
    vector_rank: int | None
    conflicts_with: tuple[tuple[str, int], ...] = ()


def check_query(query: SearchQuery, client_vectors: ClientVectors | None) -> None:
    """Refuses a malformed query, naming the field (nothing is searched)."""
    if len(query.text) > MAX_QUERY_CHARS:
        raise InvalidArgument(
            "query", f"at most {MAX_QUERY_CHARS} characters, got {len(query.text)}"
        )
    if not query.text.strip():
        if query.lexical:
            raise InvalidArgument("query", f"must not be empty in {query.mode.name} mode")
        if not query.query_vector:
            raise InvalidArgument("query", "must not be empty without a query_vector")
    if not 0 <= query.top_k <= MAX_TOP_K:
        raise InvalidArgument("top_k", f"must be between 1 and {MAX_TOP_K}, got {query.top_k}")
    if len(query.stream_ids) > MAX_STREAMS:
        raise InvalidArgument(
            "stream_ids", f"at most {MAX_STREAMS} streams, got {len(query.stream_ids)}"
        )
    for i, stream_id in enumerate(query.stream_ids):
        if not stream_id:
            raise InvalidArgument(f"stream_ids[{i}]", "must not be empty")
    if query.start is not None and query.end is not None and query.start > query.end:
        raise InvalidArgument("filter.time_range", "start is after end")
    for i, author in enumerate(query.authors):
        validation.check_id(f"filter.source_agent_ids[{i}]", author, "an agent")
    validation.normalise_tags("filter.tags_any", query.tags_any)
    validation.normalise_tags("filter.tags_all", query.tags_all)
    for stream_id, seq in query.min_seq.items():
        if seq < 1:
            raise InvalidArgument(f"min_seq[{stream_id}]", f"must be 1 or more, got {seq}")
    _check_vector(query, client_vectors)


def _check_vector(query: SearchQuery, client_vectors: ClientVectors | None) -> None:
    if client_vectors is None:
        if query.query_vector:
            raise InvalidArgument(
                "query_vector",
                "this server embeds queries itself; send the query as text (a query_vector "
                "needs a server run with --embedder client)",
            )
        return
    if query.query_vector:
        client_vectors.check([query.query_vector], "query_vector")
    elif query.vector:
        raise InvalidArgument(
            "query_vector",
            f"is required in {query.mode.name} mode: this server's vectors come from clients "
            f"({client_vectors.dim} dimensions)",
        )
