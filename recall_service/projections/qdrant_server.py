"""The vector lane on a Qdrant server: `QdrantClientIndex`, the `VectorIndex` over one
collection through `qdrant-client` (gRPC to a server, or its local / in-memory mode for tests).
Records are points as in `vectors` (ids, payloads, per-stream markers).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from qdrant_client import QdrantClient
from qdrant_client import models as qm

from cairn_server.errors import FailedPrecondition
from recall_service.projections.documents import IndexedRecord, marker_id, point_id
from recall_service.projections.embedders import Vectors
from recall_service.projections.filters import SearchFilter
from recall_service.projections.hits import LaneHit
from recall_service.projections.vectors import (
    KEYWORD_FIELDS,
    VECTOR_NAME,
    check_batch,
    lane_hit,
    payload,
    query_vector,
)


def _client_filter(flt: SearchFilter) -> qm.Filter:
    def any_of(key: str, values: Sequence[str]) -> qm.FieldCondition:
        match: Any = (
            qm.MatchValue(value=values[0]) if len(values) == 1 else qm.MatchAny(any=list(values))
        )
        return qm.FieldCondition(key=key, match=match)

    must: list[Any] = [any_of("tenant", [flt.tenant]), any_of("stream", flt.stream_ids)]
    if flt.authors:
        must.append(any_of("author", flt.authors))
    if flt.start is not None or flt.end is not None:
        must.append(qm.FieldCondition(key="created_at", range=qm.Range(gte=flt.start, lt=flt.end)))
    if flt.tags_any:
        must.append(any_of("tags", flt.tags_any))
    must.extend(any_of("tags", [tag]) for tag in flt.tags_all)
    return qm.Filter(must=must)


class QdrantClientIndex:
    """A collection on a Qdrant server (or in `qdrant-client`'s local mode)."""

    def __init__(self, client: QdrantClient, collection: str, dim: int) -> None:
        self._client = client
        self._collection = collection
        self._dim = dim
        self._marks: dict[str, int] = {}
        self._ensure_collection()

    @classmethod
    def connect(
        cls,
        collection: str,
        dim: int,
        url: str | None = None,
        api_key: str | None = None,
        path: Path | None = None,
    ) -> QdrantClientIndex:
        """A server at `url`; else the local mode persisted under `path`; else in memory."""
        if url is not None:
            client = QdrantClient(url=url, api_key=api_key)
        elif path is not None:
            client = QdrantClient(path=str(path))
        else:
            client = QdrantClient(location=":memory:")
        return cls(client, collection, dim)

    def _ensure_collection(self) -> None:
        if self._client.collection_exists(self._collection):
            info = self._client.get_collection(self._collection)
            params: Any = info.config.params.vectors
            stored = int(params[VECTOR_NAME].size)
            if stored != self._dim:
                raise FailedPrecondition(
                    f"collection '{self._collection}' holds {stored}-dim vectors, not "
                    f"{self._dim}: reindex after changing the embedder"
                )
            return
        self._client.create_collection(
            self._collection,
            vectors_config={
                VECTOR_NAME: qm.VectorParams(size=self._dim, distance=qm.Distance.COSINE)
            },
        )
        if self._client.init_options.get("location") == ":memory:" or self._client.init_options.get(
            "path"
        ):
            return  # the local mode has no payload indexes
        for name in KEYWORD_FIELDS:
            schema: Any = (
                qm.KeywordIndexParams(type=qm.KeywordIndexType.KEYWORD, is_tenant=True)
                if name == "tenant"
                else qm.PayloadSchemaType.KEYWORD
            )
            self._client.create_payload_index(self._collection, name, schema)
        self._client.create_payload_index(
            self._collection, "created_at", qm.PayloadSchemaType.FLOAT
        )
        self._client.create_payload_index(self._collection, "seq", qm.PayloadSchemaType.INTEGER)

    @property
    def dim(self) -> int:
        """The dimension of every stored vector."""
        return self._dim

    def _marker_points(self, marks: Mapping[str, int]) -> list[qm.PointStruct]:
        return [
            qm.PointStruct(id=marker_id(s), vector={}, payload={"marker_stream": s, "seq": seq})
            for s, seq in marks.items()
        ]

    def upsert(
        self, records: Sequence[IndexedRecord], vectors: Vectors, marks: Mapping[str, int]
    ) -> None:
        """Records then markers, in one request; `wait=True` returns once applied."""
        check_batch(self, records, vectors)
        points = [
            qm.PointStruct(
                id=point_id(r.stream_id, r.seq),
                vector={VECTOR_NAME: vectors[i].tolist()},
                payload=payload(r),
            )
            for i, r in enumerate(records)
        ]
        points.extend(self._marker_points(marks))
        if points:
            self._client.upsert(self._collection, points=points, wait=True)
        self._marks.update(marks)

    def delete(self, stream_id: str, seqs: Iterable[int], marks: Mapping[str, int]) -> None:
        """Deletes the points, then moves the markers."""
        ids: list[Any] = [point_id(stream_id, seq) for seq in seqs]
        if ids:
            self._client.delete(
                self._collection, points_selector=qm.PointIdsList(points=ids), wait=True
            )
        if marks:
            self._client.upsert(self._collection, points=self._marker_points(marks), wait=True)
        self._marks.update(marks)

    def last_applied(self, stream_id: str) -> int:
        """The stream's marker, read once and then tracked."""
        if stream_id not in self._marks:
            found = self._client.retrieve(self._collection, [marker_id(stream_id)])
            self._marks[stream_id] = (
                int(found[0].payload["seq"]) if found and found[0].payload else 0
            )
        return self._marks[stream_id]

    def search(self, vector: Vectors, top_k: int, flt: SearchFilter) -> list[LaneHit]:
        """Filtered nearest neighbours by cosine similarity."""
        query = query_vector(self, vector)
        if top_k < 1:
            return []
        response = self._client.query_points(
            self._collection,
            query=query,
            using=VECTOR_NAME,
            query_filter=_client_filter(flt),
            limit=top_k,
            with_payload=["stream", "seq"],
        )
        return [lane_hit(p.payload, float(p.score)) for p in response.points]

    def count(self, flt: SearchFilter) -> int:
        """How many records pass `flt`."""
        return int(
            self._client.count(self._collection, count_filter=_client_filter(flt), exact=True).count
        )

    def reset(self) -> None:
        """Drops and recreates the collection."""
        self._client.delete_collection(self._collection)
        self._marks.clear()
        self._ensure_collection()

    def close(self) -> None:
        """Closes the client (the local mode persists on every write)."""
        self._client.close()
