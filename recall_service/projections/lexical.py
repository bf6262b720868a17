"""The lexical lane: a Tantivy index scored by BM25 over English-stemmed text.

Each record is one document with its body, its context (neighbours, date: see `documents`)
and the stored fields the filters need. A stream's last applied seq is a marker document in
the same index, written in the same Tantivy commit as the records it covers: a commit is
atomic, so after a crash the marker is never ahead of the data. Re-applying records is
harmless — each write first deletes the record's key — so resuming from the marker neither
skips nor duplicates a record.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tantivy

from recall_service.projections.documents import (
    ENGLISH_STOPWORDS,
    IndexedRecord,
    IndexedText,
    RecordKey,
    check_keys,
    point_id,
    tenant_scoped,
)
from recall_service.projections.filters import HeldStreams, Reach, SearchFilter, needed, within
from recall_service.projections.hits import LaneHit

_ANALYZER = "cairn_en"
_MARKER = "marker"
_RECORD = "record"
# Fills a short body up to `LexicalSettings.body_length_floor` terms; dropped from queries.
LENGTH_FILLER = "cairnlengthfloor"


def _stored_int(doc: tantivy.Document, field: str) -> int:
    value: Any = doc.get_first(field)
    return int(value)


@dataclass(frozen=True, slots=True)
class LexicalSettings:
    """Analysis and scoring of the lexical lane.

    `stopwords` are dropped from documents and queries; `context_boost` weighs
    a match in a record's context against one in its body (1.0); `heap_bytes` is the
    writer's memory budget before it flushes a segment.

    `body_length_floor`: a body shorter than this many analysed terms is scored as if it were
    this long. BM25 divides a term's weight by the document's length relative to the average
    (Tantivy's b = 0.75, fixed), which in chat lifts a two-word reply above the message that
    holds the answer; with the floor, length counts only above it. Tantivy has no setting for
    this, so the body is filled up to the floor with `LENGTH_FILLER`, a term no query asks for
    (docs/search.md, "What is indexed"). 0 turns it off.
    """

    stopwords: tuple[str, ...] = ENGLISH_STOPWORDS
    context_boost: float = 0.8
    heap_bytes: int = 64_000_000
    body_length_floor: int = 32


def _analyzer(settings: LexicalSettings) -> tantivy.TextAnalyzer:
    builder = (
        tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.simple())
        .filter(tantivy.Filter.remove_long(40))
        .filter(tantivy.Filter.lowercase())
        .filter(tantivy.Filter.ascii_fold())
    )
    if settings.stopwords:
        builder = builder.filter(tantivy.Filter.custom_stopword(list(settings.stopwords)))
    return builder.filter(tantivy.Filter.stemmer("english")).build()


def _schema() -> tantivy.Schema:
    builder = tantivy.SchemaBuilder()
    for name in ("key", "kind", "tenant", "author", "tags", "marker_stream"):
        builder.add_text_field(name, stored=False, tokenizer_name="raw", index_option="basic")
    builder.add_text_field("stream", stored=True, tokenizer_name="raw", index_option="basic")
    builder.add_text_field("body", stored=False, tokenizer_name=_ANALYZER)
    builder.add_text_field("context", stored=False, tokenizer_name=_ANALYZER)
    builder.add_float_field("created_at", stored=False, indexed=True, fast=True)
    builder.add_integer_field("seq", stored=True, indexed=True, fast=True)
    return builder.build()


class LexicalIndex:
    """A Tantivy index under `path` (in memory when `path` is None).

    Writes are buffered until `commit`, which makes the records and the markers written since
    the last commit visible and durable together.
    """

    def __init__(self, path: Path | None, settings: LexicalSettings | None = None) -> None:
        self.settings = settings or LexicalSettings()
        self._schema = _schema()
        if path is not None:
            path.mkdir(parents=True, exist_ok=True)
        self._index = tantivy.Index(self._schema, path=None if path is None else str(path))
        self._analyzer = _analyzer(self.settings)
        self._index.register_tokenizer(_ANALYZER, self._analyzer)
        self._writer = self._index.writer(heap_size=self.settings.heap_bytes, num_threads=1)
        self._pending_marks: dict[str, int] = {}
        self._applied = self._read_marks()
        # The streams this index may hold records of (a superset: a redaction leaves its
        # stream here), replaced whole, never changed in place, since searches read it.
        self._held = HeldStreams.of(
            term for term, _ in self._index.searcher().terms_with_prefix("stream", "")
        )

    # -- writing --------------------------------------------------------------------------

    def upsert(self, records: Sequence[IndexedRecord], texts: Sequence[IndexedText]) -> None:
        """Buffers `records` (replacing any earlier version of each) with their texts."""
        if len(records) != len(texts):
            raise ValueError(f"{len(records)} records but {len(texts)} texts")
        check_keys(records)
        self._held = self._held.with_keys(r.stream_id for r in records)  # before they show
        for record, text in zip(records, texts, strict=True):
            key = point_id(record.stream_id, record.seq)
            self._writer.delete_documents_by_term("key", key)
            doc = tantivy.Document()
            doc.add_text("key", key)
            doc.add_text("kind", _RECORD)
            doc.add_text("tenant", record.tenant)
            doc.add_text("stream", record.stream_id)
            doc.add_text("author", record.author)
            for tag in record.tags:
                doc.add_text("tags", tag)
            doc.add_text("body", self._filled(text.body))
            doc.add_text("context", text.context)
            doc.add_float("created_at", float(record.created_at))
            doc.add_integer("seq", record.seq)
            self._writer.add_document(doc)

    def _filled(self, body: str) -> str:
        """`body` with `LENGTH_FILLER` added until it has `body_length_floor` terms."""
        missing = self.settings.body_length_floor - len(self._analyzer.analyze(body))
        return body + f" {LENGTH_FILLER}" * missing if missing > 0 else body

    def delete(self, stream_id: str, seqs: Iterable[int]) -> None:
        """Buffers the removal of records (a redaction)."""
        for seq in seqs:
            self._writer.delete_documents_by_term("key", point_id(stream_id, seq))

    def mark_applied(self, marks: Mapping[str, int]) -> None:
        """Buffers each stream's last applied seq; it lands with the next `commit`."""
        for stream_id, seq in marks.items():
            self._writer.delete_documents_by_term("marker_stream", stream_id)
            doc = tantivy.Document()
            doc.add_text("kind", _MARKER)
            doc.add_text("marker_stream", stream_id)
            doc.add_text("stream", stream_id)
            doc.add_integer("seq", seq)
            self._writer.add_document(doc)
            self._pending_marks[stream_id] = seq

    def commit(self) -> None:
        """Makes every buffered write visible and durable, atomically."""
        self._writer.commit()
        self._index.reload()
        self._applied.update(self._pending_marks)
        self._pending_marks.clear()

    def apply(
        self,
        records: Sequence[IndexedRecord],
        texts: Sequence[IndexedText],
        marks: Mapping[str, int],
    ) -> None:
        """Upserts `records` and moves the markers, in one atomic commit."""
        self.upsert(records, texts)
        self.mark_applied(marks)
        self.commit()

    def reset(self) -> None:
        """Removes every document and marker (before a rebuild from the log)."""
        self._writer.delete_all_documents()
        self._pending_marks.clear()
        self._writer.commit()
        self._index.reload()
        self._applied.clear()
        self._held = HeldStreams()

    def close(self) -> None:
        """Drops uncommitted writes and releases the writer lock."""
        self._writer.rollback()
        self._writer.wait_merging_threads()

    # -- reading --------------------------------------------------------------------------

    def last_applied(self, stream_id: str) -> int:
        """The last seq of `stream_id` committed to this index (0 when none)."""
        return self._applied.get(stream_id, 0)

    def _read_marks(self) -> dict[str, int]:
        searcher = self._index.searcher()
        query = tantivy.Query.term_query(self._schema, "kind", _MARKER)
        total = searcher.search(query, limit=1, count=True).count  # type: ignore[attr-defined]  # missing from the stubs
        found: dict[str, int] = {}
        if not total:
            return found
        for _, address in searcher.search(query, limit=total).hits:
            doc = searcher.doc(address)
            found[str(doc.get_first("stream"))] = _stored_int(doc, "seq")
        return found

    def count(self, flt: SearchFilter) -> int:
        """How many records pass `flt`."""
        query = self._filter_query(flt, records_only=True)
        return int(self._index.searcher().search(query, limit=1, count=True).count)  # type: ignore[attr-defined]

    def query_terms(self, text: str) -> list[str]:
        """The distinct analysed terms of a query, in first-seen order (never the filler)."""
        return [t for t in dict.fromkeys(self._analyzer.analyze(text)) if t != LENGTH_FILLER]

    def search(self, text: str, top_k: int, flt: SearchFilter) -> list[LaneHit]:
        """The `top_k` records passing `flt` with the highest BM25 score for `text`."""
        terms = self.query_terms(text)
        if not terms or top_k < 1:
            return []
        clauses: list[tuple[tantivy.Occur, tantivy.Query]] = []
        for term in terms:
            clauses.append((tantivy.Occur.Should, self._term("body", term)))
            if self.settings.context_boost > 0:
                clauses.append(
                    (
                        tantivy.Occur.Should,
                        tantivy.Query.boost_query(
                            self._term("context", term), self.settings.context_boost
                        ),
                    )
                )
        searcher = self._index.searcher()
        # Less of the filter when the rest admits every record here (`filters.needed`): the
        # terms alone, or beside the tenant condition, cost Tantivy far less than beside a
        # many-stream condition (all 100 streams at 100k: 0.85 or 2.0 ms against 2.84). A
        # stream added meanwhile shows in the hits, and then the whole filter is applied.
        reach = needed(flt, self._held)
        if reach != "streams":
            hits = self._top(searcher, clauses, top_k, self._restriction(flt, reach))
            if within(flt, hits):
                return hits
        return self._top(searcher, clauses, top_k, self._restriction(flt, "streams"))

    def _restriction(self, flt: SearchFilter, reach: Reach) -> tantivy.Query | None:
        """The part of `flt` a search applies (see `filters.needed`)."""
        if reach == "none":
            return None
        if reach == "tenant":
            return self._any("tenant", [flt.tenant])
        return self._filter_query(flt)

    def _top(
        self,
        searcher: tantivy.Searcher,
        clauses: list[tuple[tantivy.Occur, tantivy.Query]],
        top_k: int,
        restriction: tantivy.Query | None,
    ) -> list[LaneHit]:
        if restriction is not None:
            # A required clause beside the optional term clauses, not a second required
            # clause around their union: Tantivy then scores each admitted document once
            # (one stream at 100k: 0.2 ms against 0.45). A document that passes it but has
            # none of the terms scores 0 and is dropped (BM25 is positive for a match).
            zero = tantivy.Query.const_score_query(restriction, 0.0)
            clauses = [*clauses, (tantivy.Occur.Must, zero)]
        hits = []
        for score, address in searcher.search(
            tantivy.Query.boolean_query(clauses), limit=top_k, count=False
        ).hits:
            if score <= 0.0:
                continue
            doc = searcher.doc(address)
            key = RecordKey(str(doc.get_first("stream")), _stored_int(doc, "seq"))
            hits.append(LaneHit(key, float(score)))
        return hits

    def _term(self, field: str, value: str) -> tantivy.Query:
        return tantivy.Query.term_query(self._schema, field, value, index_option="freq")

    def _any(self, field: str, values: Sequence[str]) -> tantivy.Query:
        if len(values) == 1:
            return tantivy.Query.term_query(self._schema, field, values[0], index_option="basic")
        return tantivy.Query.term_set_query(self._schema, field, list(values))

    def _filter_query(self, flt: SearchFilter, *, records_only: bool = False) -> tantivy.Query:
        """The filter's conditions, all required. Markers carry a stream but no text: a
        search, whose terms they cannot match, leaves out the `kind` condition unless
        `records_only`. The tenant condition is left out for keys scoped to the tenant
        (`documents.tenant_scoped`), which `upsert` refuses for any other tenant."""
        must = [self._any("stream", list(flt.stream_ids))]
        if records_only:
            must.append(self._any("kind", [_RECORD]))
        if not tenant_scoped(flt.tenant, flt.stream_ids):
            must.append(self._any("tenant", [flt.tenant]))
        if flt.authors:
            must.append(self._any("author", list(flt.authors)))
        if flt.start is not None or flt.end is not None:
            must.append(
                tantivy.Query.range_query(
                    self._schema,
                    "created_at",
                    tantivy.FieldType.Float,
                    lower_bound=flt.start if flt.start is not None else float("-inf"),
                    upper_bound=flt.end if flt.end is not None else float("inf"),
                    include_lower=True,
                    include_upper=False,
                )
            )
        if flt.tags_any:
            must.append(self._any("tags", list(flt.tags_any)))
        must.extend(self._any("tags", [tag]) for tag in flt.tags_all)
        return tantivy.Query.boolean_query([(tantivy.Occur.Must, q) for q in must])
