"""A search's input checks: each malformed field is refused by name, with the limit."""

from __future__ import annotations

import pytest

from cairn_server.errors import InvalidArgument
from recall_service.projections.embedders import ClientVectors
from recall_service.search_query import SearchMode, SearchQuery, check_query

CLIENT = ClientVectors(dim=3)


@pytest.mark.parametrize(
    ("query", "client", "message"),
    [
        (SearchQuery(""), None, "query: must not be empty in HYBRID mode"),
        (
            SearchQuery("  ", mode=SearchMode.LEXICAL),
            None,
            "query: must not be empty in LEXICAL mode",
        ),
        (
            SearchQuery("", mode=SearchMode.VECTOR),
            None,
            "query: must not be empty without a query_vector",
        ),
        (SearchQuery("x" * 4097), None, "query: at most 4096 characters, got 4097"),
        (SearchQuery("tea", top_k=101), None, "top_k: must be between 1 and 100, got 101"),
        (SearchQuery("tea", top_k=-1), None, "top_k: must be between 1 and 100, got -1"),
        (
            SearchQuery("tea", stream_ids=tuple(f"s{i}" for i in range(101))),
            None,
            "stream_ids: at most 100 streams, got 101",
        ),
        (SearchQuery("tea", stream_ids=("a", "")), None, "stream_ids[1]: must not be empty"),
        (SearchQuery("tea", start=20, end=10), None, "filter.time_range: start is after end"),
        (
            SearchQuery("tea", authors=("ok", "no spaces")),
            None,
            "filter.source_agent_ids[1]: 'no spaces' is not a valid id: use 1-128 characters of "
            "[A-Za-z0-9_.:@-], starting with a letter or digit",
        ),
        (SearchQuery("tea", min_seq={"room": 0}), None, "min_seq[room]: must be 1 or more, got 0"),
        (
            SearchQuery("tea", query_vector=(1.0, 0.0, 0.0)),
            None,
            "query_vector: this server embeds queries itself; send the query as text (a "
            "query_vector needs a server run with --embedder client)",
        ),
        (
            SearchQuery("tea"),
            CLIENT,
            "query_vector: is required in HYBRID mode: this server's vectors come from clients "
            "(3 dimensions)",
        ),
        (
            SearchQuery("tea", mode=SearchMode.VECTOR, query_vector=(1.0, 2.0)),
            CLIENT,
            "query_vector: must have 3 dimensions, got 2",
        ),
        (
            SearchQuery("", mode=SearchMode.VECTOR, query_vector=(0.0, 0.0, 0.0)),
            CLIENT,
            "query_vector: must not be all zeros",
        ),
    ],
)
def test_a_malformed_query_is_refused_naming_the_field(
    query: SearchQuery, client: ClientVectors | None, message: str
) -> None:
    with pytest.raises(InvalidArgument) as refused:
        check_query(query, client)
    assert refused.value.message == message


@pytest.mark.parametrize(
    ("query", "client"),
    [
        (SearchQuery("tea"), None),
        (SearchQuery("tea", top_k=100, mode=SearchMode.LEXICAL), None),
        (SearchQuery("tea", mode=SearchMode.LEXICAL), CLIENT),
        (SearchQuery("", mode=SearchMode.VECTOR, query_vector=(0.0, 1.0, 0.0)), CLIENT),
    ],
)
def test_a_well_formed_query_passes(query: SearchQuery, client: ClientVectors | None) -> None:
    check_query(query, client)


def test_top_k_zero_means_ten() -> None:
    assert SearchQuery("tea").limit == 10
    assert SearchQuery("tea", top_k=3).limit == 3
