"""The Tantivy lane: English stemming, stop words, context weighting, atomic commits."""

from __future__ import annotations

from pathlib import Path

import pytest

from cairn_server.errors import InvalidArgument
from recall_service.projections.documents import IndexedRecord, IndexedText, RecordKey
from recall_service.projections.filters import SearchFilter
from recall_service.projections.lexical import LexicalIndex, LexicalSettings

ALL = SearchFilter("t", ("s",))


def rec(seq: int, text: str) -> IndexedRecord:
    return IndexedRecord("t", "s", seq, "ana", float(seq), text)


def index_of(texts: list[IndexedText], settings: LexicalSettings | None = None) -> LexicalIndex:
    index = LexicalIndex(None, settings)
    index.apply([rec(i + 1, t.body) for i, t in enumerate(texts)], texts, {"s": len(texts)})
    return index


def seqs(index: LexicalIndex, query: str) -> list[int]:
    return [h.key.seq for h in index.search(query, 10, ALL)]


def test_english_stemming_matches_word_forms() -> None:
    index = index_of([IndexedText("she was running marathons"), IndexedText("a quiet day")])
    assert seqs(index, "runs marathon") == [1]


def test_stop_words_alone_match_nothing() -> None:
    index = index_of([IndexedText("what did you do there")])
    assert index.query_terms("What did you do there?") == []
    assert seqs(index, "what did you do there") == []


def test_query_terms_are_analysed_and_distinct() -> None:
    index = LexicalIndex(None)
    assert index.query_terms("Which hikes did Ana's sisters hike?") == ["hike", "ana", "sister"]


def test_without_stop_words_every_word_is_a_term() -> None:
    index = LexicalIndex(None, LexicalSettings(stopwords=()))
    assert index.query_terms("what did") == ["what", "did"]


def test_a_body_match_outranks_the_same_match_in_context() -> None:
    index = index_of([IndexedText("nothing here", "pottery class"), IndexedText("pottery class")])
    hits = index.search("pottery", 10, ALL)
    assert [h.key.seq for h in hits] == [2, 1]


def test_context_boost_zero_ignores_the_context() -> None:
    texts = [IndexedText("nothing here", "pottery class"), IndexedText("pottery class")]
    assert seqs(index_of(texts, LexicalSettings(context_boost=0.0)), "pottery") == [2]


def test_hits_carry_stream_and_seq() -> None:
    index = index_of([IndexedText("alpha")])
    hit = index.search("alpha", 1, ALL)[0]
    assert hit.key == RecordKey("s", 1)
    assert hit.score > 0


def test_uncommitted_writes_are_invisible_and_lost_on_close(tmp_path: Path) -> None:
    index = LexicalIndex(tmp_path)
    index.upsert([rec(1, "alpha")], [IndexedText("alpha")])
    index.mark_applied({"s": 1})
    assert index.count(ALL) == 0
    assert index.last_applied("s") == 0
    index.close()
    reopened = LexicalIndex(tmp_path)
    assert (reopened.count(ALL), reopened.last_applied("s")) == (0, 0)
    reopened.close()


def test_mismatched_records_and_texts_are_refused() -> None:
    with pytest.raises(ValueError, match="2 records but 1 texts"):
        LexicalIndex(None).upsert([rec(1, "a"), rec(2, "b")], [IndexedText("a")])


def test_a_non_positive_top_k_returns_nothing() -> None:
    assert index_of([IndexedText("alpha")]).search("alpha", 0, ALL) == []


@pytest.mark.parametrize(("tenant", "stream"), [("t", "u/s"), ("t/x", "t/x/s"), ("t", "tt/s")])
def test_a_record_keyed_to_another_tenant_is_refused_and_nothing_is_buffered(
    tenant: str, stream: str
) -> None:
    index = LexicalIndex(None)
    good = IndexedRecord(tenant, "plain", 1, "ana", 1.0, "alpha")
    bad = IndexedRecord(tenant, stream, 1, "ana", 1.0, "alpha")
    with pytest.raises(
        InvalidArgument, match=f"stream_id: '{stream}' is a tenant-scoped key of another tenant"
    ):
        index.upsert([good, bad], [IndexedText("alpha"), IndexedText("alpha")])
    index.commit()
    assert index.count(SearchFilter(tenant, ("plain", stream))) == 0


def test_a_search_returns_only_records_with_a_query_term_however_many_pass_the_filter() -> None:
    index = index_of([IndexedText("alpha"), IndexedText("beta"), IndexedText("gamma alpha")])
    hits = index.search("alpha", 10, ALL)
    assert [h.key.seq for h in hits] == [1, 3]
    assert all(h.score > 0 for h in hits)
    assert index.count(ALL) == 3


SHORT = IndexedText("garden")
LONGER = IndexedText("we spent the whole afternoon in the garden planting tomatoes and beans")
LONGEST = IndexedText(" ".join(["garden", *(f"word{i}" for i in range(40))]))


def scores(index: LexicalIndex, query: str) -> dict[int, float]:
    return {h.key.seq: h.score for h in index.search(query, 10, ALL)}


def test_below_the_length_floor_a_short_body_is_not_favoured_for_its_brevity() -> None:
    floored = scores(index_of([SHORT, LONGER, LONGEST]), "garden")
    assert floored[1] == floored[2]  # 1 and 9 terms: both scored as 32 long
    assert floored[3] < floored[2]  # 41 terms: above the floor, its own length counts
    plain = scores(
        index_of([SHORT, LONGER, LONGEST], LexicalSettings(body_length_floor=0)), "garden"
    )
    assert plain[1] > plain[2] > plain[3]


def test_the_length_filler_is_never_a_query_term() -> None:
    index = index_of([SHORT, LONGER])
    assert index.query_terms("cairnlengthfloor garden") == ["garden"]
    assert seqs(index, "cairnlengthfloor") == []
