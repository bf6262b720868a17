"""The vector lane: one `VectorIndex` interface, two Qdrant adapters.

- `QdrantEdgeIndex` (here): Qdrant's engine in-process (`qdrant-edge-py`), data under a
  directory; the server runs it in a child process (`vector_worker.EdgeWorkerIndex`).
- `QdrantClientIndex` (`qdrant_server`): `qdrant-client` against a Qdrant server, or its
  local/in-memory mode.

Each record is a point whose id is fixed by its key, so writing a record twice replaces it.
A new Edge shard (its `point ids` mark says so) uses `documents.keyed_point_id(stream_id,
seq)`, which holds the key, so a search names its hits from their ids and reads no payload;
an older shard and a Qdrant server use `documents.point_id(stream_id, seq)`, and each hit's
key is read from its payload.

A stream's last applied seq is a payload-only point (no vector, no tenant, so no search can
return it) placed last in the same upsert as the records it covers: Qdrant Edge logs the
whole upsert as one WAL entry and replays it whole after a crash; a server applies one
request as one operation; the local mode persists points in order. In every case the marker
is never ahead of the data, and re-applying after a crash only overwrites.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import qdrant_edge as edge

from cairn_server.errors import FailedPrecondition, InvalidArgument
from recall_service.projections.documents import (
    IndexedRecord,
    RecordKey,
    check_keys,
    keyed_point_id,
    marker_id,
    point_id,
    split_keyed_id,
    stream_hash,
    tenant_scoped,
)
from recall_service.projections.embedders import Vectors
from recall_service.projections.filters import HeldStreams, Reach, SearchFilter, needed, within
from recall_service.projections.hits import LaneHit

VECTOR_NAME = "dense"
# Below this many KB of vectors passing a filter, Qdrant scores them all exactly instead of
# walking the HNSW graph under the filter. Qdrant's default (10,000 KB: ~10k 256-dim vectors)
# sends a search over 10% of a 100k-record tenant to the filtered graph, which found only 87%
# of the true top 10 in our measurement; exact scoring of 20k vectors takes ~4 ms.
FULL_SCAN_THRESHOLD_KB = 20_000
KEYWORD_FIELDS = ("tenant", "stream", "author", "tags", "marker_stream")
# A search runs on the calling thread. Edge's default spreads one over a pool of a thread per
# core. At 100k one thread was faster for the filtered searches the service mostly runs (one
# stream 0.26 ms against 0.30) and slower only for an HNSW search over all 100 streams on an
# idle machine (3.6 against 2.8); a server on two cores answers many searches at once, where
# a pool per search adds hand-offs and no spare core.
SEARCH_THREADS = 1
# A new shard keeps an int8 copy of its vectors in RAM (scalar quantization, a quarter of the
# vectors' size) and scores candidates with it; the best `OVERSAMPLING` x limit are rescored
# with the original vectors. At 100k (256 dims, top 50, one thread) against the same vectors
# unquantized: one stream 0.59 -> 0.48 ms, ten streams 2.86 -> 2.00, all streams (HNSW) 2.00 ->
# 1.52, the graph build 64 -> 34 s; the same top 10 and top 50 as exact scoring for one and ten
# streams, and as the unquantized HNSW search for all (docs/search.md). Without rescoring the
# int8 scores alone lost 2-4% of the true neighbours.
OVERSAMPLING = 2.0
_SEARCH_PARAMS = edge.SearchParams(
    quantization=edge.QuantizationSearchParams(rescore=True, oversampling=OVERSAMPLING)
)
# A payload-only point saying that the shard's records are named by `keyed_point_id`; a
# shard without it (made before) keeps `point_id`. Reading a hit's payload was most of a
# search in the Edge worker at 100k: one stream 1.5 ms with it, 0.5 without (the payloads
# are read from disk, and between two searches the other processes take the caches).
_KEYED_IDS = marker_id("\x00point ids")
_KEY_FIELDS = ["stream", "seq"]


def _hashed_mark(stream_id: str) -> str:
    """The id of the payload-only point saying that a stream of a keyed shard is named by
    `point_id`: its `stream_hash` was another stream's first."""
    return marker_id(f"\x00hashed\x00{stream_id}")


class VectorIndex(Protocol):
    """A vector index of records with filtered nearest-neighbour search."""

    @property
    def dim(self) -> int:
        """The dimension of every stored vector."""
        ...

    def upsert(
        self, records: Sequence[IndexedRecord], vectors: Vectors, marks: Mapping[str, int]
    ) -> None:
        """Writes `records` with their vectors, then moves the streams' markers to `marks`."""
        ...

    def delete(self, stream_id: str, seqs: Iterable[int], marks: Mapping[str, int]) -> None:
        """Removes records (a redaction), then moves the markers to `marks`."""
        ...

    def last_applied(self, stream_id: str) -> int:
        """The last seq of `stream_id` durably applied here (0 when none)."""
        ...

    def search(self, vector: Vectors, top_k: int, flt: SearchFilter) -> list[LaneHit]:
        """The `top_k` records passing `flt` nearest to `vector` (cosine), best first."""
        ...

    def count(self, flt: SearchFilter) -> int:
        """How many records pass `flt`."""
        ...

    def reset(self) -> None:
        """Removes every record and marker (before a rebuild from the log)."""
        ...

    def close(self) -> None:
        """Makes everything durable and releases the index."""
        ...


def payload(record: IndexedRecord) -> dict[str, Any]:
    """The stored fields a record's point carries: identity and everything filters use."""
    return {
        "tenant": record.tenant,
        "stream": record.stream_id,
        "seq": record.seq,
        "author": record.author,
        "created_at": float(record.created_at),
        "tags": list(record.tags),
    }


def check_batch(index: VectorIndex, records: Sequence[IndexedRecord], vectors: Vectors) -> None:
    """Refuses vectors of the wrong shape, and a stream key that names another tenant
    (`documents.check_keys`)."""
    if vectors.shape != (len(records), index.dim):
        raise InvalidArgument(
            "vectors", f"expected shape ({len(records)}, {index.dim}), got {vectors.shape}"
        )
    check_keys(records)


def query_vector(index: VectorIndex, vector: Vectors) -> list[float]:
    flat = np.asarray(vector, dtype=np.float32).reshape(-1)
    if flat.shape[0] != index.dim:
        raise InvalidArgument("vector", f"must have {index.dim} dimensions, got {flat.shape[0]}")
    floats: list[float] = flat.tolist()  # the same floats, 5x faster than one at a time
    return floats


def lane_hit(payload_: Mapping[str, Any] | None, score: float) -> LaneHit:
    assert payload_ is not None
    return LaneHit(key=RecordKey(str(payload_["stream"]), int(payload_["seq"])), score=score)


# -- Qdrant Edge --------------------------------------------------------------------------


def _edge_filter(flt: SearchFilter) -> edge.Filter:
    """The filter as Edge conditions. When the stream keys are scoped to the tenant (as the
    service's are) the tenant condition is left out: it admits nothing more (`tenant_scoped`)
    and costs Edge as much again per candidate point (one stream at 100k: 1.0 ms with it,
    0.6 without)."""

    def any_of(key: str, values: Sequence[str]) -> edge.FieldCondition:
        match: Any = edge.MatchValue(values[0]) if len(values) == 1 else edge.MatchAny(list(values))
        return edge.FieldCondition(key=key, match=match)

    must: list[Any] = [any_of("stream", flt.stream_ids)]
    if not tenant_scoped(flt.tenant, flt.stream_ids):
        must.append(any_of("tenant", [flt.tenant]))
    if flt.authors:
        must.append(any_of("author", flt.authors))
    if flt.start is not None or flt.end is not None:
        must.append(
            edge.FieldCondition(key="created_at", range=edge.RangeFloat(gte=flt.start, lt=flt.end))
        )
    if flt.tags_any:
        must.append(any_of("tags", flt.tags_any))
    must.extend(any_of("tags", [tag]) for tag in flt.tags_all)
    return edge.Filter(must=must)


class QdrantEdgeIndex:
    """Qdrant Edge: the Qdrant engine in-process, its shard under `path`.

    `quantize` (the default) keeps an int8 copy of the vectors in RAM for the search (scalar
    quantization; the best candidates are rescored with the originals, see `OVERSAMPLING`);
    it is fixed when the shard is created: a shard created without it keeps searching its
    original vectors until `cairn recall reindex` rebuilds it.
    """

    # Every call holds the GIL for its whole run (measured: a ticker thread stalls).
    holds_gil = True

    def __init__(self, path: Path, dim: int, quantize: bool = True, keyed_ids: bool = True) -> None:
        self._path = path
        self._dim = dim
        self._quantize = quantize
        self._keyed_new = keyed_ids  # for a shard made here; an existing one keeps its own
        self._marks: dict[str, int] = {}
        self._shard = self._open()
        self._keyed = self._names_by_key()
        # The streams this shard may hold points of (a superset: a redaction leaves its
        # stream here), replaced whole, never changed in place, since searches read it;
        # None when unknown (a shard made elsewhere, without the stream index to count by).
        self._held: HeldStreams | None = None
        # In a keyed shard: the stream whose keyed ids each `stream_hash` names, the hashes
        # named by no one stream (marks lost; hits with them are named from payloads), and
        # the streams named by `point_id` because another stream had their hash first.
        self._by_hash: dict[int, str] = {}
        self._ambiguous: set[int] = set()
        self._hashed: frozenset[str] = frozenset()
        self._read_streams()

    def _names_by_key(self) -> bool:
        found = self._shard.retrieve([_KEYED_IDS], True, False)
        return bool(found and found[0].payload and found[0].payload.get("point_ids") == "keyed")

    def _read_streams(self) -> None:
        """The streams held, and in a keyed shard how each is named, from the shard."""
        if "stream" not in self._shard.info().payload_schema:
            return  # a shard made elsewhere: `_held` stays unknown
        found = self._shard.facet(edge.FacetRequest(key="stream", limit=1 << 31, exact=True))
        keys = [str(hit.value) for hit in found.hits]
        self._held = HeldStreams.of(keys)
        if not self._keyed:
            return
        by_hash: dict[int, list[str]] = {}
        for key in keys:
            by_hash.setdefault(stream_hash(key), []).append(key)
        shared = [key for group in by_hash.values() if len(group) > 1 for key in group]
        if shared:
            marks = self._shard.retrieve([_hashed_mark(k) for k in shared], True, False)
            self._hashed = frozenset(str(m.payload["hashed_stream"]) for m in marks if m.payload)
        for hashed, group in by_hash.items():
            keyed = [key for key in group if key not in self._hashed]
            if len(keyed) == 1:
                self._by_hash[hashed] = keyed[0]
            elif keyed:
                self._ambiguous.add(hashed)

    def _newly_hashed(self, keys: Iterable[str]) -> list[str]:
        """Of these streams, those new to the shard whose hash another stream names."""
        out: list[str] = []
        claimed: dict[int, str] = {}
        for key in dict.fromkeys(keys):
            hashed = stream_hash(key)
            if key in self._hashed or self._by_hash.get(hashed) == key:
                continue
            first = self._by_hash.get(hashed) or claimed.setdefault(hashed, key)
            if first != key or hashed in self._ambiguous:
                out.append(key)
        return out

    def _point_id(self, stream_id: str, seq: int, hashed: Iterable[str] = ()) -> str:
        if not self._keyed or stream_id in self._hashed or stream_id in hashed:
            return point_id(stream_id, seq)
        return keyed_point_id(stream_id, seq)

    def _open(self) -> edge.EdgeShard:
        if (self._path / "edge_config.json").exists():
            stored = shard_dim(self._path)
            if stored != self._dim:
                raise FailedPrecondition(
                    f"the vector index at {self._path} holds {stored}-dim vectors, not "
                    f"{self._dim}: reindex after changing the embedder"
                )
            # Only what the config gives changes; the rest stays as the shard was created.
            return edge.EdgeShard.load(str(self._path), self._config())
        quantization = (
            edge.ScalarQuantizationConfig(type=edge.ScalarType.Int8, always_ram=True)
            if self._quantize
            else None
        )
        shard = edge.EdgeShard.create(
            str(self._path),
            self._config(
                quantization_config=quantization,
                hnsw_config=edge.HnswIndexConfig(
                    m=16, ef_construct=100, full_scan_threshold=FULL_SCAN_THRESHOLD_KB
                ),
            ),
        )
        for name in KEYWORD_FIELDS:
            # The stream is the tenant index: a build lays each stream's points out together,
            # so a search of one stream scores neighbouring vectors (one stream at 100k:
            # 0.34 ms against 0.64 with the tenant as the tenant index).
            params = edge.KeywordIndexParams(is_tenant=True) if name == "stream" else None
            shard.update(
                edge.UpdateOperation.create_field_index(
                    name, params if params is not None else edge.PayloadSchemaType.Keyword
                )
            )
        shard.update(
            edge.UpdateOperation.create_field_index("created_at", edge.PayloadSchemaType.Float)
        )
        shard.update(edge.UpdateOperation.create_field_index("seq", edge.PayloadSchemaType.Integer))
        if self._keyed_new:
            scheme = edge.Point(id=_KEYED_IDS, vector={}, payload={"point_ids": "keyed"})
            shard.update(edge.UpdateOperation.upsert_points([scheme]))
        return shard

    def _config(self, **settings: Any) -> edge.EdgeConfig:
        return edge.EdgeConfig(
            vectors={
                VECTOR_NAME: edge.EdgeVectorParams(size=self._dim, distance=edge.Distance.Cosine)
            },
            max_search_threads=SEARCH_THREADS,
            **settings,
        )

    @property
    def dim(self) -> int:
        """The dimension of every stored vector."""
        return self._dim

    def upsert(
        self, records: Sequence[IndexedRecord], vectors: Vectors, marks: Mapping[str, int]
    ) -> None:
        """Records and markers in one upsert: one WAL entry, applied whole or not at all."""
        check_batch(self, records, vectors)
        self.upsert_payloads(vectors, [payload(r) for r in records], marks)

    def upsert_payloads(
        self, vectors: Vectors, payloads: Sequence[dict[str, Any]], marks: Mapping[str, int]
    ) -> None:
        """`upsert` once the records are payloads (and their vectors checked); each point's
        id follows from its payload's stream and seq."""
        keys = [str(p["stream"]) for p in payloads]
        if self._held is not None:  # before the points can be found
            self._held = self._held.with_keys(keys)
        # A stream whose hash is taken is named by `point_id`, said by a mark written in the
        # same upsert (one WAL entry), and noted here only once the upsert is applied.
        hashed = self._newly_hashed(keys) if self._keyed else []
        points = [
            edge.Point(id=_hashed_mark(k), vector={}, payload={"hashed_stream": k}) for k in hashed
        ]
        points.extend(
            edge.Point(
                id=self._point_id(key, int(p["seq"]), hashed),
                vector={VECTOR_NAME: vectors[i].tolist()},
                payload=p,
            )
            for i, (key, p) in enumerate(zip(keys, payloads, strict=True))
        )
        points.extend(self._marker_points(marks))
        if points:
            self._shard.update(edge.UpdateOperation.upsert_points(points))
        self._marks.update(marks)
        if self._keyed:
            self._hashed = self._hashed | set(hashed)
            for key in dict.fromkeys(keys):
                if key not in self._hashed:
                    self._by_hash.setdefault(stream_hash(key), key)

    def _marker_points(self, marks: Mapping[str, int]) -> list[edge.Point]:
        return [
            edge.Point(id=marker_id(s), vector={}, payload={"marker_stream": s, "seq": seq})
            for s, seq in marks.items()
        ]

    def delete(self, stream_id: str, seqs: Iterable[int], marks: Mapping[str, int]) -> None:
        """Deletes the points, then (a later WAL entry) moves the markers."""
        ids: list[Any] = [self._point_id(stream_id, seq) for seq in seqs]
        if ids:
            self._shard.update(edge.UpdateOperation.delete_points(ids))
        if marks:
            self._shard.update(edge.UpdateOperation.upsert_points(self._marker_points(marks)))
        self._marks.update(marks)

    def last_applied(self, stream_id: str) -> int:
        """The stream's marker, read from the shard once and then tracked."""
        if stream_id not in self._marks:
            found = self._shard.retrieve([marker_id(stream_id)], True, False)
            self._marks[stream_id] = (
                int(found[0].payload["seq"]) if found and found[0].payload else 0
            )
        return self._marks[stream_id]

    def search(self, vector: Vectors, top_k: int, flt: SearchFilter) -> list[LaneHit]:
        """Filtered nearest neighbours by cosine similarity."""
        query = query_vector(self, vector)
        if top_k < 1:
            return []
        # Less of the filter when the rest admits every point here, as in the lexical lane
        # (all 100 streams at 100k: 0.33 ms with no condition, 0.37 with the tenant's, 0.86
        # with the streams', the same hits); a stream added meanwhile shows in the hits, and
        # then the whole filter is applied.
        reach = "streams" if self._held is None else needed(flt, self._held)
        if reach != "streams":
            hits = self._search(query, top_k, self._restriction(flt, reach))
            if within(flt, hits):
                return hits
        return self._search(query, top_k, self._restriction(flt, "streams"))

    @staticmethod
    def _restriction(flt: SearchFilter, reach: Reach) -> edge.Filter | None:
        """The part of `flt` a search applies (see `filters.needed`)."""
        if reach == "none":
            return None
        if reach == "tenant":
            tenant = edge.FieldCondition(key="tenant", match=edge.MatchValue(flt.tenant))
            return edge.Filter(must=[tenant])
        return _edge_filter(flt)

    def _search(self, query: list[float], top_k: int, flt: edge.Filter | None) -> list[LaneHit]:
        found = self._shard.search(
            edge.SearchRequest(
                query=edge.Query.Nearest(query, using=VECTOR_NAME),
                limit=top_k,
                filter=flt,
                params=_SEARCH_PARAMS,
                with_payload=False if self._keyed else _KEY_FIELDS,
                with_vector=False,
            )
        )
        if not self._keyed:
            return [lane_hit(p.payload, float(p.score)) for p in found]
        named: list[tuple[str | None, int, Any, float]] = []
        for p in found:
            split = split_keyed_id(p.id)
            stream = None if split is None else self._by_hash.get(split[0])
            named.append((stream, 0 if split is None else split[1], p.id, float(p.score)))
        unnamed = [point for stream, _, point, _ in named if stream is None]
        if unnamed:  # a stream named by `point_id`, or whose hash no one stream names
            payloads = {q.id: q.payload for q in self._shard.retrieve(unnamed, _KEY_FIELDS, False)}
            return [
                LaneHit(RecordKey(stream, seq), score)
                if stream is not None
                else lane_hit(payloads[point], score)
                for stream, seq, point, score in named
                if stream is not None or payloads.get(point)  # (deleted meanwhile: gone)
            ]
        return [LaneHit(RecordKey(stream, seq), score) for stream, seq, _, score in named if stream]

    def count(self, flt: SearchFilter) -> int:
        """How many records pass `flt`."""
        return int(self._shard.count(edge.CountRequest(exact=True, filter=_edge_filter(flt))))

    def optimize(self) -> bool:
        """Builds HNSW and payload indexes over sealed segments (blocking)."""
        return bool(self._shard.optimize())

    def flush(self) -> None:
        """Writes every applied change into the segments (the WAL already holds them)."""
        self._shard.flush()

    def reset(self) -> None:
        """Deletes the shard's directory and starts an empty one."""
        self._shard.close()
        shutil.rmtree(self._path)
        self._marks.clear()
        self._shard = self._open()
        self._keyed = self._names_by_key()
        self._held = HeldStreams()
        self._by_hash, self._ambiguous, self._hashed = {}, set(), frozenset()

    def close(self) -> None:
        """Flushes and closes the shard."""
        self._shard.flush()
        self._shard.close()


def shard_dim(path: Path) -> int:
    """The dense vector size recorded in an Edge shard's configuration."""
    return int(_shard_config(path)["vectors"][VECTOR_NAME]["size"])


def shard_quantized(path: Path) -> bool:
    """Whether an Edge shard keeps a quantized copy of its vectors (fixed at creation)."""
    return _shard_config(path).get("quantization_config") is not None


def _shard_config(path: Path) -> dict[str, Any]:
    config: dict[str, Any] = json.loads((path / "edge_config.json").read_text())
    return config
