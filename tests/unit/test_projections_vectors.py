"""Vector-lane specifics: dimensions are checked, on writes, queries and reopening."""

from __future__ import annotations

import hashlib
import json
import uuid
from pathlib import Path

import numpy as np
import pytest
import qdrant_edge as edge

from cairn_server.errors import FailedPrecondition, InvalidArgument
from recall_service.projections import documents
from recall_service.projections import vectors as vectors_module
from recall_service.projections.documents import (
    IndexedRecord,
    RecordKey,
    keyed_point_id,
    point_id,
    split_keyed_id,
    stream_hash,
)
from recall_service.projections.embedders import normalise_rows
from recall_service.projections.filters import SearchFilter
from recall_service.projections.qdrant_server import QdrantClientIndex
from recall_service.projections.vectors import (
    SEARCH_THREADS,
    VECTOR_NAME,
    QdrantEdgeIndex,
    VectorIndex,
    _edge_filter,
    lane_hit,
)

ALL = SearchFilter("t", ("s",))


def records(n: int) -> list[IndexedRecord]:
    return [IndexedRecord("t", "s", i, "ana", float(i), f"r{i}") for i in range(1, n + 1)]


@pytest.fixture(params=["edge", "qdrant-client"])
def index(request: pytest.FixtureRequest, tmp_path: Path) -> VectorIndex:
    if request.param == "edge":
        return QdrantEdgeIndex(tmp_path / "edge", 3)
    return QdrantClientIndex.connect("records", 3)


def test_nearest_neighbour_comes_first_with_cosine_score(index: VectorIndex) -> None:
    vectors = normalise_rows([[1, 0, 0], [0, 1, 0], [1, 1, 0]])
    index.upsert(records(3), vectors, {"s": 3})
    hits = index.search(normalise_rows([[1, 0.1, 0]])[0], 3, ALL)
    assert [h.key for h in hits] == [RecordKey("s", 1), RecordKey("s", 3), RecordKey("s", 2)]
    assert hits[0].score == pytest.approx(1 / np.sqrt(1.01), abs=1e-5)


def test_a_batch_of_the_wrong_shape_is_refused(index: VectorIndex) -> None:
    with pytest.raises(InvalidArgument, match=r"vectors: expected shape \(2, 3\), got \(2, 4\)"):
        index.upsert(records(2), np.zeros((2, 4), dtype=np.float32), {})


def test_a_query_of_the_wrong_dimension_is_refused(index: VectorIndex) -> None:
    with pytest.raises(InvalidArgument, match="vector: must have 3 dimensions, got 2"):
        index.search(np.zeros(2, dtype=np.float32), 3, ALL)


def test_edge_refuses_to_reopen_with_another_dimension(tmp_path: Path) -> None:
    QdrantEdgeIndex(tmp_path / "edge", 3).close()
    with pytest.raises(FailedPrecondition, match="holds 3-dim vectors, not 5: reindex"):
        QdrantEdgeIndex(tmp_path / "edge", 5)


def test_client_refuses_a_collection_of_another_dimension(tmp_path: Path) -> None:
    QdrantClientIndex.connect("records", 3, path=tmp_path).close()
    with pytest.raises(FailedPrecondition, match="holds 3-dim vectors, not 5: reindex"):
        QdrantClientIndex.connect("records", 5, path=tmp_path)


def test_edge_leaves_the_tenant_condition_out_only_for_keys_scoped_to_the_tenant() -> None:
    def keys(flt: SearchFilter) -> list[str]:
        conditions = _edge_filter(flt).must or []
        return [str(c.key) for c in conditions if isinstance(c, edge.FieldCondition)]

    assert keys(SearchFilter("t", ("t/a", "t/b"))) == ["stream"]
    assert keys(SearchFilter("t", ("t/a", "u/b"))) == ["stream", "tenant"]
    assert keys(SearchFilter("t", ("a",))) == ["stream", "tenant"]
    assert keys(SearchFilter("t/x", ("t/x/a",))) == ["stream", "tenant"]
    assert keys(SearchFilter("t", ("t/a",), authors=("ana",))) == ["stream", "author"]


@pytest.mark.parametrize(("tenant", "stream"), [("t", "u/s"), ("t/x", "t/x/s"), ("t", "tt/s")])
def test_a_point_keyed_to_another_tenant_is_refused(
    index: VectorIndex, tenant: str, stream: str
) -> None:
    record = IndexedRecord(tenant, stream, 1, "ana", 1.0, "r1")
    with pytest.raises(
        InvalidArgument, match=f"stream_id: '{stream}' is a tenant-scoped key of another tenant"
    ):
        index.upsert([record], normalise_rows([[1, 0, 0]]), {})
    assert index.count(SearchFilter(tenant, (stream,))) == 0


def test_edge_opens_an_older_shard_with_one_search_thread_keeping_its_settings(
    tmp_path: Path,
) -> None:
    params = edge.EdgeVectorParams(size=3, distance=edge.Distance.Cosine)
    config = edge.EdgeConfig(
        vectors={VECTOR_NAME: params},
        hnsw_config=edge.HnswIndexConfig(m=16, ef_construct=100, full_scan_threshold=1234),
    )
    edge.EdgeShard.create(str(tmp_path / "old"), config).close()
    QdrantEdgeIndex(tmp_path / "old", 3).close()
    stored = json.loads((tmp_path / "old" / "edge_config.json").read_text())
    assert stored["max_search_threads"] == SEARCH_THREADS == 1
    assert stored["hnsw_config"]["full_scan_threshold"] == 1234
    assert stored.get("quantization_config") is None  # quantization is fixed at creation


def test_a_new_edge_shard_keeps_an_int8_copy_unless_told_not_to(tmp_path: Path) -> None:
    QdrantEdgeIndex(tmp_path / "q", 3).close()
    QdrantEdgeIndex(tmp_path / "plain", 3, quantize=False).close()
    config = json.loads((tmp_path / "q" / "edge_config.json").read_text())
    assert config["quantization_config"] == {"scalar": {"type": "int8", "always_ram": True}}
    plain = json.loads((tmp_path / "plain" / "edge_config.json").read_text())
    assert plain.get("quantization_config") is None


def test_a_quantized_shard_answers_exactly_what_exact_scoring_answers(tmp_path: Path) -> None:
    # Enough vectors (12 MB) that the build makes an indexed segment with its int8 copy.
    n, dim = 12_000, 256
    rng = np.random.default_rng(7)
    vectors = normalise_rows(rng.standard_normal((n, dim)).astype(np.float32))
    points = [IndexedRecord("t", f"t/s{i % 4}", i // 4 + 1, "ana", 1.0, "") for i in range(n)]
    index = QdrantEdgeIndex(tmp_path / "q", dim)
    index.upsert(points, vectors, {})
    assert index.optimize()
    assert list((tmp_path / "q").rglob("quantized.data"))
    flt = SearchFilter("t", ("t/s1",))
    in_stream = np.arange(1, n, 4)
    int8_alone_differs = 0
    for query in normalise_rows(rng.standard_normal((20, dim)).astype(np.float32)):
        best = in_stream[np.argsort(-(vectors[in_stream] @ query), kind="stable")[:50]]
        exact = [RecordKey("t/s1", int(i) // 4 + 1) for i in best]
        assert [h.key for h in index.search(query, 50, flt)] == exact
        # The int8 copy is what scored the candidates: alone, it orders them otherwise.
        unrescored = index._shard.search(
            edge.SearchRequest(
                query=edge.Query.Nearest([float(x) for x in query], using=VECTOR_NAME),
                limit=50,
                filter=_edge_filter(flt),
                params=edge.SearchParams(quantization=edge.QuantizationSearchParams(rescore=False)),
                with_payload=["stream", "seq"],
                with_vector=False,
            )
        )
        int8_alone_differs += [lane_hit(p.payload, 0).key for p in unrescored] != exact
    assert int8_alone_differs == 20
    index.close()


def two_streams() -> tuple[list[IndexedRecord], np.ndarray]:
    points = [
        IndexedRecord("t", key, seq, "ana", 1.0, "") for key in ("t/a", "t/b") for seq in (1, 2)
    ]
    return points, normalise_rows(
        [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.9, 0.1, 0.0], [0.0, 0.0, 1.0]]
    )


def test_a_new_edge_shard_names_its_points_by_their_keys(tmp_path: Path) -> None:
    points, vectors = two_streams()
    index = QdrantEdgeIndex(tmp_path / "e", 3)
    index.upsert(points, vectors, {"t/a": 2, "t/b": 2})
    found = index._shard.retrieve([keyed_point_id("t/b", 1)], True, False)
    assert found[0].payload is not None and found[0].payload["seq"] == 1
    assert not index._shard.retrieve([point_id("t/b", 1)], True, False)
    query = normalise_rows([[1, 0.05, 0]])[0]
    both = SearchFilter("t", ("t/a", "t/b"))
    expected = [RecordKey("t/a", 1), RecordKey("t/b", 1), RecordKey("t/a", 2), RecordKey("t/b", 2)]
    assert [h.key for h in index.search(query, 4, both)] == expected
    index.delete("t/b", [1], {"t/b": 2})  # as a redaction does
    assert [h.key for h in index.search(query, 4, both)] == [expected[0], *expected[2:]]
    index.close()
    reopened = QdrantEdgeIndex(tmp_path / "e", 3)  # names its streams again from the shard
    assert [h.key for h in reopened.search(query, 4, both)] == [expected[0], *expected[2:]]
    assert [h.key for h in reopened.search(query, 4, SearchFilter("t", ("t/a",)))] == [
        expected[0],
        expected[2],
    ]


def test_an_older_edge_shard_keeps_naming_its_points_by_hash(tmp_path: Path) -> None:
    points, vectors = two_streams()
    QdrantEdgeIndex(tmp_path / "old", 3, keyed_ids=False).close()
    index = QdrantEdgeIndex(tmp_path / "old", 3)  # reopened with today's default
    index.upsert(points, vectors, {})
    assert index._shard.retrieve([point_id("t/a", 2)], True, False)
    assert not index._shard.retrieve([keyed_point_id("t/a", 2)], True, False)
    index.delete("t/a", [2], {})
    hits = index.search(normalise_rows([[1, 0, 0]])[0], 4, SearchFilter("t", ("t/a", "t/b")))
    assert [h.key for h in hits] == [RecordKey("t/a", 1), RecordKey("t/b", 1), RecordKey("t/b", 2)]


def test_streams_whose_hashes_collide_are_named_from_their_payloads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(documents, "stream_hash", lambda key: 7)
    monkeypatch.setattr(vectors_module, "stream_hash", lambda key: 7)
    points = [IndexedRecord("t", key, 1, "ana", 1.0, "") for key in ("t/a", "t/b")]
    index = QdrantEdgeIndex(tmp_path / "e", 3)
    # One upsert each, so that each stream's first point replaces nothing of the other's.
    index.upsert(points[:1], normalise_rows([[1, 0, 0]]), {})
    index.upsert(points[1:], normalise_rows([[0, 1, 0]]), {})
    # t/a had the hash first: t/b is named by `point_id`, and a mark in the shard says so.
    assert (index._by_hash, index._hashed) == ({7: "t/a"}, frozenset({"t/b"}))
    assert index._shard.retrieve([point_id("t/b", 1)], True, False)
    query, both = normalise_rows([[1, 0.2, 0]])[0], SearchFilter("t", ("t/a", "t/b"))
    assert [h.key for h in index.search(query, 2, both)] == [
        RecordKey("t/a", 1),
        RecordKey("t/b", 1),
    ]
    index.upsert([IndexedRecord("t", "t/b", 2, "ana", 1.0, "")], normalise_rows([[1, 0.3, 0]]), {})
    index.close()
    reopened = QdrantEdgeIndex(tmp_path / "e", 3)
    assert (reopened._by_hash, reopened._hashed) == ({7: "t/a"}, frozenset({"t/b"}))
    reopened.delete("t/b", [1], {})
    keys = [h.key for h in reopened.search(query, 3, both)]
    assert keys == [RecordKey("t/b", 2), RecordKey("t/a", 1)]  # nearer, then t/b 1 gone


def test_a_keyed_point_id_holds_its_stream_hash_and_seq() -> None:
    point = uuid.UUID(keyed_point_id("t/a", 12345))
    assert split_keyed_id(point) == (stream_hash("t/a"), 12345)
    assert split_keyed_id(uuid.UUID(point_id("t/a", 12345))) is None  # a UUID's variant bit
    assert split_keyed_id(str(point)) == split_keyed_id(point.int) == (stream_hash("t/a"), 12345)
    assert stream_hash("t/a") == int.from_bytes(hashlib.blake2b(b"t/a", digest_size=8).digest())
