"""Behaviours both search lanes share, run against every adapter: Qdrant Edge, qdrant-client
(local mode) and Tantivy. Filters never leak; the last applied seq survives a crash and the
indexer resumes with no duplicate and no gap; a reset and rebuild gives identical results."""

from __future__ import annotations

import itertools
import subprocess
import sys
import textwrap
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from recall_service.projections.documents import (
    IndexedRecord,
    RecordKey,
    TextSettings,
    indexed_texts,
)
from recall_service.projections.embedders import Vectors, normalise_rows
from recall_service.projections.filters import HeldStreams, SearchFilter, matches
from recall_service.projections.hits import LaneHit
from recall_service.projections.lexical import LexicalIndex
from recall_service.projections.qdrant_server import QdrantClientIndex
from recall_service.projections.vectors import QdrantEdgeIndex, VectorIndex

DIM = 8
LANES = ("edge", "qdrant-client", "tantivy")


def vector_for(record: IndexedRecord) -> Vectors:
    """A deterministic vector per record (seeded by stream and seq)."""
    seed = (sum(map(ord, record.stream_id)) * 100_003 + record.seq) % (2**32)
    return normalise_rows(np.random.default_rng(seed).normal(size=(1, DIM)))


class Lane:
    """One adapter behind the operations the suite needs."""

    def __init__(self, kind: str, root: Path) -> None:
        self.kind = kind
        self.root = root
        self.vectors: VectorIndex | None = None
        self.lexical: LexicalIndex | None = None
        self.open()

    def open(self) -> None:
        if self.kind == "edge":
            self.vectors = QdrantEdgeIndex(self.root / "edge", DIM)
        elif self.kind == "qdrant-client":
            self.vectors = QdrantClientIndex.connect("records", DIM, path=self.root / "local")
        else:
            self.lexical = LexicalIndex(self.root / "tantivy")

    def close(self) -> None:
        if self.vectors is not None:
            self.vectors.close()
        if self.lexical is not None:
            self.lexical.close()
        self.vectors = self.lexical = None

    def write(self, records: Sequence[IndexedRecord], marks: Mapping[str, int]) -> None:
        if self.vectors is not None:
            matrix = (
                np.concatenate([vector_for(r) for r in records])
                if records
                else (np.zeros((0, DIM), dtype=np.float32))
            )
            self.vectors.upsert(records, matrix, marks)
        else:
            assert self.lexical is not None
            self.lexical.apply(records, indexed_texts(records, TextSettings()), marks)

    def delete(self, stream_id: str, seqs: Sequence[int], marks: Mapping[str, int]) -> None:
        if self.vectors is not None:
            self.vectors.delete(stream_id, seqs, marks)
        else:
            assert self.lexical is not None
            self.lexical.delete(stream_id, seqs)
            self.lexical.mark_applied(marks)
            self.lexical.commit()

    def search(self, flt: SearchFilter, top_k: int = 1000, probe: str = "apple") -> list[LaneHit]:
        if self.vectors is not None:
            query = normalise_rows(np.ones((1, DIM)))[0]
            return self.vectors.search(query, top_k, flt)
        assert self.lexical is not None
        return self.lexical.search(probe, top_k, flt)

    def count(self, flt: SearchFilter) -> int:
        if self.vectors is not None:
            return self.vectors.count(flt)
        assert self.lexical is not None
        return self.lexical.count(flt)

    def last_applied(self, stream_id: str) -> int:
        index = self.vectors if self.vectors is not None else self.lexical
        assert index is not None
        return index.last_applied(stream_id)

    def reset(self) -> None:
        index = self.vectors if self.vectors is not None else self.lexical
        assert index is not None
        index.reset()


@pytest.fixture(params=LANES)
def lane(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Lane]:
    opened = Lane(request.param, tmp_path)
    yield opened
    opened.close()


def corpus(
    streams: Sequence[tuple[str, str]] = (("t1", "s1"), ("t1", "s2"), ("t2", "s1x")),
) -> list[IndexedRecord]:
    """Records over two tenants, three streams, three authors, four tags, ten times."""
    out = []
    for (tenant, stream), seq in itertools.product(streams, range(1, 13)):
        out.append(
            IndexedRecord(
                tenant=tenant,
                stream_id=stream,
                seq=seq,
                author=("ana", "bo", "cy")[seq % 3],
                created_at=1000.0 + 10 * seq,
                text=f"apple number {seq} in {stream}",
                tags=tuple(
                    t for i, t in enumerate(("red", "green", "blue", "sour")) if seq % (i + 2) == 0
                ),
            )
        )
    return out


def log_of(stream: str, n: int, tenant: str = "t1") -> list[IndexedRecord]:
    return [
        IndexedRecord(tenant, stream, seq, "ana", 1000.0 + seq, f"apple {seq}")
        for seq in range(1, n + 1)
    ]


def catch_up(lane: Lane, log: Sequence[IndexedRecord], batch: int = 4) -> None:
    """What the indexer does: apply the log after the stream's marker, batch by batch."""
    stream = log[0].stream_id
    pending = [r for r in log if r.seq > lane.last_applied(stream)]
    for start in range(0, len(pending), batch):
        chunk = pending[start : start + batch]
        lane.write(chunk, {stream: chunk[-1].seq})


FILTERS = [
    SearchFilter("t1", ("s1",)),
    SearchFilter("t1", ("s1", "s2")),
    SearchFilter("t2", ("s1",)),  # a stream id of another tenant's name space: nothing
    SearchFilter("t1", ("s1x",)),  # another tenant's stream, asked for by the wrong tenant
    SearchFilter("t1", ("s1", "s2"), authors=("bo",)),
    SearchFilter("t1", ("s1", "s2"), authors=("ana", "cy")),
    SearchFilter("t1", ("s2",), start=1050.0),
    SearchFilter("t1", ("s2",), end=1050.0),
    SearchFilter("t1", ("s1",), start=1030.0, end=1090.0),
    SearchFilter("t1", ("s1", "s2"), tags_any=("red", "blue")),
    SearchFilter("t1", ("s1", "s2"), tags_all=("red", "green")),
    SearchFilter("t2", ("s1x",), tags_all=("red",), tags_any=("sour",), authors=("ana",)),
    SearchFilter("t1", ("s1",), tags_any=("absent",)),
]


@pytest.mark.parametrize("flt", FILTERS, ids=[str(i) for i in range(len(FILTERS))])
def test_search_returns_exactly_the_records_the_filter_admits(
    lane: Lane, flt: SearchFilter
) -> None:
    records = corpus()
    lane.write(records, {})
    expected = {RecordKey(r.stream_id, r.seq) for r in records if matches(flt, r)}
    found = lane.search(flt)
    assert {h.key for h in found} == expected
    assert len(found) == len(expected)
    assert lane.count(flt) == len(expected)


# The service's keys: `tenant/stream`, so two tenants may both have a stream "s1". With such
# keys Edge and Tantivy leave the tenant condition out (`documents.tenant_scoped`); nothing
# may leak.
SCOPED = (("t1", "t1/s1"), ("t1", "t1/s2"), ("t2", "t2/s1"))
SCOPED_FILTERS = [  # and how many of the corpus's records each admits
    (SearchFilter("t1", ("t1/s1",)), 12),
    (SearchFilter("t1", ("t1/s1", "t1/s2")), 24),
    (SearchFilter("t2", ("t2/s1",)), 12),
    (SearchFilter("t1", ("t2/s1",)), 0),  # another tenant's key: nothing
    (SearchFilter("t2", ("t1/s1", "t2/s1")), 12),  # one key of each: only t2's records
    (SearchFilter("t1", ("t1/s1", "t1/s2"), authors=("bo",), tags_any=("red", "sour")), 4),
    (SearchFilter("t2", ("t2/s1",), start=1030.0, end=1090.0, tags_all=("red",)), 3),
]


@pytest.mark.parametrize(
    ("flt", "admitted"), SCOPED_FILTERS, ids=[str(i) for i in range(len(SCOPED_FILTERS))]
)
def test_tenant_scoped_keys_admit_exactly_the_tenants_records(
    lane: Lane, flt: SearchFilter, admitted: int
) -> None:
    records = corpus(SCOPED)
    lane.write(records, {})
    expected = {RecordKey(r.stream_id, r.seq) for r in records if matches(flt, r)}
    assert len(expected) == admitted
    found = lane.search(flt)
    assert {h.key for h in found} == expected
    assert len(found) == admitted
    assert lane.count(flt) == admitted


def test_a_search_never_returns_the_seq_markers(lane: Lane) -> None:
    lane.write(log_of("s1", 3), {"s1": 3, "s1x": 9})
    keys = [h.key for h in lane.search(SearchFilter("t1", ("s1",)))]
    assert sorted(k.seq for k in keys) == [1, 2, 3]


def test_top_k_limits_the_hits_best_first(lane: Lane) -> None:
    lane.write(corpus(), {})
    hits = lane.search(SearchFilter("t1", ("s1", "s2")), top_k=5)
    assert len(hits) == 5
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)


def test_last_applied_is_zero_for_an_unknown_stream(lane: Lane) -> None:
    assert lane.last_applied("never-written") == 0


def test_last_applied_survives_a_clean_reopen(lane: Lane) -> None:
    catch_up(lane, log_of("s1", 10))
    lane.close()
    lane.open()
    assert lane.last_applied("s1") == 10
    assert lane.count(SearchFilter("t1", ("s1",))) == 10


def test_crash_between_data_and_marker_resumes_with_no_duplicate_and_no_gap(lane: Lane) -> None:
    log = log_of("s1", 10)
    lane.write(log[:4], {"s1": 4})
    lane.write(log[4:7], {})  # the data landed, then the process died before the marker
    lane.close()
    lane.open()
    assert lane.last_applied("s1") == 4
    catch_up(lane, log)
    assert lane.last_applied("s1") == 10
    seqs = sorted(h.key.seq for h in lane.search(SearchFilter("t1", ("s1",))))
    assert seqs == list(range(1, 11))
    assert lane.count(SearchFilter("t1", ("s1",))) == 10


def test_rewriting_a_record_replaces_it(lane: Lane) -> None:
    log = log_of("s1", 3)
    lane.write(log, {"s1": 3})
    lane.write(log, {"s1": 3})
    assert lane.count(SearchFilter("t1", ("s1",))) == 3


def test_a_deleted_record_is_gone_and_the_marker_moves(lane: Lane) -> None:
    lane.write(log_of("s1", 5), {"s1": 5})
    lane.delete("s1", [2, 4], {"s1": 6})
    assert sorted(h.key.seq for h in lane.search(SearchFilter("t1", ("s1",)))) == [1, 3, 5]
    assert lane.last_applied("s1") == 6


def test_reset_then_rebuild_gives_identical_results(lane: Lane) -> None:
    records = corpus()
    lane.write(records, {"s1": 12, "s2": 12, "s1x": 12})
    before = [lane.search(flt, top_k=7) for flt in FILTERS]
    lane.reset()
    assert lane.last_applied("s1") == 0
    assert lane.count(SearchFilter("t1", ("s1", "s2"))) == 0
    lane.write(records, {"s1": 12, "s2": 12, "s1x": 12})
    assert [lane.search(flt, top_k=7) for flt in FILTERS] == before
    assert lane.last_applied("s2") == 12


# Less of a filter when the rest admits every record an index holds (`filters.needed`): Edge
# and Tantivy track the streams they hold, and fall back to the whole filter when a hit shows
# a stream they did not count. The spy records how much of each filter the index applied.
HELD = (("t1", "t1/s1"), ("t1", "t1/s2"))
EVERY_HELD = SearchFilter("t1", ("t1/s1", "t1/s2", "t1/s9"))


@pytest.fixture(params=["edge", "tantivy"])
def tracking(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Lane]:
    """A lane whose index tracks the streams it holds."""
    opened = Lane(request.param, tmp_path)
    yield opened
    opened.close()


def index_of(lane: Lane) -> Any:
    return lane.lexical if lane.lexical is not None else lane.vectors


def reaches(lane: Lane, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Records, for each query the lane's index runs from now on, how much of the filter it
    applied: "none", "tenant" or "streams"."""
    seen: list[str] = []
    index = index_of(lane)
    restriction = index._restriction

    def spy(flt: SearchFilter, reach: str) -> Any:
        seen.append(reach)
        return restriction(flt, reach)

    monkeypatch.setattr(index, "_restriction", spy)
    return seen


def held_of(lane: Lane) -> HeldStreams:
    held: HeldStreams = index_of(lane)._held
    return held


def test_a_filter_naming_every_stream_held_is_left_out_with_the_same_hits(
    tracking: Lane, monkeypatch: pytest.MonkeyPatch
) -> None:
    lane = tracking
    lane.write(corpus(HELD), {})
    # The same records through a filter that cannot be left out (an author condition).
    filtered = lane.search(SearchFilter("t1", ("t1/s1", "t1/s2"), authors=("ana", "bo", "cy")))
    seen = reaches(lane, monkeypatch)
    hits = lane.search(EVERY_HELD)
    assert seen == ["none"]
    assert len(hits) == 24
    assert {h.key for h in hits} == {h.key for h in filtered}
    assert sorted(h.score for h in hits) == sorted(h.score for h in filtered)
    lane.search(SearchFilter("t1", ("t1/s1",)))  # one of two streams: filtered
    lane.search(SearchFilter("t1", ("t1/s1", "t1/s2"), tags_any=("red",)))
    assert seen == ["none", "streams", "streams"]


def test_with_other_tenants_held_the_tenant_condition_stands_for_every_stream_of_it(
    tracking: Lane, monkeypatch: pytest.MonkeyPatch
) -> None:
    lane = tracking
    lane.write(corpus(SCOPED), {})  # t1/s1, t1/s2 and t2/s1
    seen = reaches(lane, monkeypatch)
    t1 = lane.search(EVERY_HELD)
    t2 = lane.search(SearchFilter("t2", ("t2/s1",)))
    assert seen == ["tenant", "tenant"]
    assert {h.key.stream_id for h in t1} == {"t1/s1", "t1/s2"}
    assert len(t1) == 24
    assert {h.key.stream_id for h in t2} == {"t2/s1"}
    assert len(t2) == 12
    lane.search(SearchFilter("t2", ("t1/s1", "t2/s1")))  # a key of another tenant
    assert seen[-1] == "streams"


@pytest.mark.parametrize(
    ("streams", "first"), [(HELD, "none"), (SCOPED, "tenant")], ids=["alone", "shared"]
)
def test_a_hit_of_a_stream_not_counted_sends_the_search_back_to_the_filter(
    tracking: Lane,
    streams: tuple[tuple[str, str], ...],
    first: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    lane = tracking
    lane.write(corpus((*streams, ("t1", "t1/s3"))), {})
    # As if t1/s3 had been written between the check and the search.
    index_of(lane)._held = HeldStreams.of(key for _, key in streams)
    seen = reaches(lane, monkeypatch)
    hits = lane.search(SearchFilter("t1", ("t1/s1", "t1/s2")))
    assert seen == [first, "streams"]
    assert {h.key.stream_id for h in hits} == {"t1/s1", "t1/s2"}
    assert len(hits) == 24


def test_the_streams_held_are_read_back_on_open_and_forgotten_on_reset(
    tracking: Lane, monkeypatch: pytest.MonkeyPatch
) -> None:
    lane = tracking
    lane.write(corpus(HELD), {"t1/s1": 12, "t1/s2": 12})
    lane.close()
    lane.open()
    assert held_of(lane) == HeldStreams({"t1": frozenset({"t1/s1", "t1/s2"})})
    seen = reaches(lane, monkeypatch)
    assert len(lane.search(EVERY_HELD)) == 24
    assert seen == ["none"]
    lane.reset()
    assert held_of(lane) == HeldStreams()
    lane.write(log_of("t1/s4", 3), {})
    assert held_of(lane) == HeldStreams({"t1": frozenset({"t1/s4"})})


CRASH_SCRIPT = textwrap.dedent(
    """
    import os, sys
    from pathlib import Path
    sys.path[:0] = [{root!r}]
    from tests.unit.test_projections_lanes import Lane, log_of
    lane = Lane({kind!r}, Path({path!r}))
    log = log_of("s1", 10)
    lane.write(log[:4], {{"s1": 4}})
    lane.write(log[4:7], {{}})
    os._exit(17)  # no close, no flush: a crash
    """
)


@pytest.mark.parametrize("kind", ["edge", "tantivy"])
def test_a_real_process_crash_loses_no_acknowledged_batch_and_resumes_exactly(
    kind: str, tmp_path: Path
) -> None:
    root = str(Path(__file__).resolve().parents[2])
    script = CRASH_SCRIPT.format(root=root, kind=kind, path=str(tmp_path))
    done = subprocess.run(
        [sys.executable, "-c", script], check=False, capture_output=True, timeout=60
    )
    assert done.returncode == 17, done.stderr.decode()
    lane = Lane(kind, tmp_path)
    try:
        assert lane.last_applied("s1") == 4
        assert lane.count(SearchFilter("t1", ("s1",))) == 7
        catch_up(lane, log_of("s1", 10))
        assert lane.count(SearchFilter("t1", ("s1",))) == 10
        assert sorted(h.key.seq for h in lane.search(SearchFilter("t1", ("s1",)))) == list(
            range(1, 11)
        )
    finally:
        lane.close()
