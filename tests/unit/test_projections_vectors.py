"""Vector-lane specifics: dimensions are checked, on writes, queries and reopening."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import qdrant_edge as edge

from cairn_server.errors import FailedPrecondition, InvalidArgument
from recall_service.projections.documents import IndexedRecord, RecordKey
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
