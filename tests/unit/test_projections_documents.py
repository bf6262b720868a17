"""What a record is indexed under, its ids, and the filter's meaning."""

from __future__ import annotations

import random
import re
import string

import pytest

from cairn_server.errors import InvalidArgument
from recall_service.projections.documents import (
    ENGLISH_STOPWORDS,
    IndexedRecord,
    IndexedText,
    TextSettings,
    body_text,
    content_terms,
    contexts_containing,
    format_date,
    indexed_texts,
    marker_id,
    normalise,
    point_id,
    read_seqs,
    reindexed_seqs,
)
from recall_service.projections.filters import SearchFilter, matches


def rec(seq: int, text: str = "", author: str = "Ana", stream: str = "s") -> IndexedRecord:
    return IndexedRecord("t", stream, seq, author, 1683554160.0 + seq, text or f"turn {seq}")


def test_normalise_folds_quotes_controls_and_spaces() -> None:
    assert normalise("  \u201cIt\u2019s\u201d\tdone\x00 ok\n\n") == '"It\'s" done ok'


def test_normalise_applies_nfkc() -> None:
    assert normalise("\ufb01ne \u2460") == "fine 1"


def test_body_carries_the_author_when_asked() -> None:
    assert body_text(rec(1, "hi there"), TextSettings()) == "Ana: hi there"
    assert body_text(rec(1, "hi there"), TextSettings(with_author=False)) == "hi there"


def test_format_date_is_day_month_year_in_utc() -> None:
    assert format_date(1683554160.0) == "8 May 2023"


def test_without_context_settings_the_context_is_empty() -> None:
    settings = TextSettings(with_date=False, neighbours_before=0, neighbours_after=0)
    assert indexed_texts([rec(1, "a"), rec(2, "b")], settings) == [
        IndexedText("Ana: a"),
        IndexedText("Ana: b"),
    ]


def test_neighbours_are_positions_in_the_input_list() -> None:
    records = [rec(3, "c"), rec(1, "a"), rec(2, "b"), rec(2, "other", stream="x")]
    settings = TextSettings(neighbours_before=1, neighbours_after=1)
    assert [t.neighbours for t in indexed_texts(records, settings)] == [(2,), (2,), (1, 0), ()]


def test_neighbours_come_from_the_same_stream_in_seq_order() -> None:
    records = [rec(3, "c"), rec(1, "a"), rec(2, "b"), rec(2, "other", stream="x")]
    settings = TextSettings(with_date=False, neighbours_before=1, neighbours_after=1)
    texts = indexed_texts(records, settings)
    assert [t.context for t in texts] == ["Ana: b", "Ana: b", "Ana: a\nAna: c", ""]


def test_neighbour_windows_are_asymmetric_and_cut_to_length() -> None:
    records = [rec(i, "x" * 10) for i in range(1, 6)]
    settings = TextSettings(
        with_author=False,
        with_date=False,
        neighbours_before=2,
        neighbours_after=0,
        neighbour_max_chars=4,
    )
    assert indexed_texts(records, settings)[4].context == "xxxx\nxxxx"
    assert indexed_texts(records, settings)[0].context == ""


def test_the_date_joins_the_context_first() -> None:
    texts = indexed_texts(
        [rec(1, "a"), rec(2, "b")], TextSettings(with_date=True, neighbours_before=1)
    )
    assert texts[1] == IndexedText(
        "Ana: b", "8 May 2023\nAna: a", neighbours=(0,), date="8 May 2023"
    )
    assert texts[1].joined() == "Ana: b\n8 May 2023\nAna: a"


def test_point_ids_are_stable_and_distinct() -> None:
    assert point_id("s", 1) == point_id("s", 1)
    # Pinned: changing how ids are made would orphan every point of existing indexes.
    assert point_id("s", 1) == "14654e3d-1f25-5b17-87b4-0b0c5a367248"
    assert len({point_id("s", 1), point_id("s", 2), point_id("s1", 1), marker_id("s")}) == 4


def test_content_terms_drop_stopwords_and_single_letters() -> None:
    assert content_terms("What did I buy at the Café? A new bike, e.g. for 2 kids!") == frozenset(
        {"buy", "café", "new", "bike", "kids"}
    )
    assert content_terms("What did I buy at the cafe? A new bike_rack, e.g. for 2 of 42 kids!") == (
        frozenset({"buy", "cafe", "new", "bike", "rack", "42", "kids"})
    )


def test_content_terms_of_ascii_text_are_the_unicode_patterns_words() -> None:
    """ASCII text takes a faster pattern: the words are those of the general one."""
    word = re.compile(r"[^\W_]+")
    rng = random.Random(11)
    alphabet = string.printable + "ab"
    for _ in range(2000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 60)))
        general = {
            w
            for w in word.findall(normalise(text).lower())
            if len(w) > 1 and w not in ENGLISH_STOPWORDS
        }
        assert content_terms(text) == frozenset(general), text


FILTER_CASES = [
    (SearchFilter("t", ("s",)), True),
    (SearchFilter("u", ("s",)), False),
    (SearchFilter("t", ("x",)), False),
    (SearchFilter("t", ("x", "s")), True),
    (SearchFilter("t", ("s",), authors=("Bo",)), False),
    (SearchFilter("t", ("s",), start=1683554161.0), True),
    (SearchFilter("t", ("s",), start=1683554161.5), False),
    (SearchFilter("t", ("s",), end=1683554161.0), False),
    (SearchFilter("t", ("s",), end=1683554161.5), True),
    (SearchFilter("t", ("s",), tags_any=("a", "z")), True),
    (SearchFilter("t", ("s",), tags_any=("z",)), False),
    (SearchFilter("t", ("s",), tags_all=("a", "b")), True),
    (SearchFilter("t", ("s",), tags_all=("a", "z")), False),
]


@pytest.mark.parametrize(("flt", "expected"), FILTER_CASES)
def test_filter_semantics(flt: SearchFilter, expected: bool) -> None:
    record = IndexedRecord("t", "s", 1, "Ana", 1683554161.0, "x", tags=("a", "b"))
    assert matches(flt, record) is expected


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"tenant": "", "stream_ids": ("s",)}, "filter.tenant: a search must name its tenant"),
        ({"tenant": "t", "stream_ids": ()}, "filter.stream_ids: a search must name at least one"),
        ({"tenant": "t", "stream_ids": ("s", "")}, "filter.stream_ids: a search must name"),
        (
            {"tenant": "t", "stream_ids": ("s",), "start": 5.0, "end": 4.0},
            "filter.end: the end 4.0",
        ),
    ],
)
def test_a_filter_without_tenant_or_stream_or_with_a_reversed_range_is_refused(
    kwargs: dict[str, object], message: str
) -> None:
    with pytest.raises(InvalidArgument, match=message):
        SearchFilter(**kwargs)  # type: ignore[arg-type]


def test_new_records_reindex_the_ones_whose_after_context_they_join() -> None:
    settings = TextSettings(neighbours_before=2, neighbours_after=1)
    assert reindexed_seqs(10, 12, settings) == range(9, 13)
    assert read_seqs(10, 12, settings) == range(7, 13)
    assert reindexed_seqs(1, 3, settings) == range(1, 4)
    assert read_seqs(2, 2, settings) == range(1, 3)


def test_a_redacted_record_names_every_record_whose_context_held_it() -> None:
    settings = TextSettings(neighbours_before=3, neighbours_after=2)
    assert contexts_containing(10, settings) == range(8, 14)
    assert contexts_containing(1, settings) == range(1, 5)
    records = [rec(i, f"w{i}") for i in range(1, 20)]
    holding = [
        r.seq
        for r, t in zip(records, indexed_texts(records, settings), strict=True)
        if "w10" in t.context.split()
    ]
    assert holding == [8, 9, 11, 12, 13]
