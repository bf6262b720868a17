"""Opening the search projections from the server's settings: which embedder, which vector
index (Qdrant Edge under the index directory, or a Qdrant server), and the Tantivy index.

The index directory (`--index-dir`, default `<data dir>/index`) belongs to one recall
process: Tantivy allows one writer, and a second process opening it is refused at start-up.
Replicas of a fleet each have their own. It records the embedder that filled it
(`embedder.json`); opening it with another embedder is refused until a reindex.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from qdrant_client import QdrantClient

from cairn_server.errors import FailedPrecondition, InvalidArgument
from recall_service.projection_set import Projections
from recall_service.projections.embedders import (
    ClientVectors,
    Embedder,
    OpenAIEmbedder,
    WordLlamaEmbedder,
)
from recall_service.projections.lexical import LexicalIndex
from recall_service.projections.qdrant_server import QdrantClientIndex
from recall_service.projections.vector_worker import EdgeWorkerIndex
from recall_service.projections.vectors import QdrantEdgeIndex, VectorIndex, shard_quantized

log = logging.getLogger("cairn.recall.search")
EmbedderName = Literal["wordllama", "openai", "client"]
EMBEDDER_FILE = "embedder.json"


@dataclass(frozen=True, slots=True)
class SearchConfig:
    """Where the projections live and what fills the vector lane."""

    index_dir: Path
    embedder: EmbedderName = "wordllama"
    embedding_dim: int = 0
    embedding_url: str = ""
    embedding_model: str = ""
    embedding_api_key: str = ""
    qdrant_url: str = ""
    qdrant_api_key: str = ""
    qdrant_collection: str = "cairn_records"
    # Qdrant Edge in a child process (`projections.vector_worker`); False: in this process.
    edge_process: bool = True


def make_embedder(config: SearchConfig) -> Embedder:
    """The configured embedder; nothing is downloaded."""
    if config.embedder == "wordllama":
        return WordLlamaEmbedder(dim=config.embedding_dim or 256)
    if config.embedder == "client":
        if config.embedding_dim < 1:
            raise InvalidArgument("embedding_dim", "--embedder client needs --embedding-dim N")
        return ClientVectors(config.embedding_dim)
    if not (config.embedding_url and config.embedding_model and config.embedding_dim >= 1):
        raise InvalidArgument(
            "embedder",
            "--embedder openai needs --embedding-url, --embedding-model and --embedding-dim",
        )
    return OpenAIEmbedder(
        config.embedding_url,
        config.embedding_model,
        config.embedding_dim,
        api_key=config.embedding_api_key or None,
    )


def client_vectors_of(config: SearchConfig) -> ClientVectors | None:
    """The check of client-supplied vectors when the embedder is `client`, else None (what a
    server that searches in another process needs to accept writes)."""
    if config.embedder != "client":
        return None
    embedder = make_embedder(config)
    assert isinstance(embedder, ClientVectors)
    return embedder


def open_vectors(config: SearchConfig, dim: int) -> VectorIndex:
    """A Qdrant server collection (gRPC) when a URL is given, else Qdrant Edge on disk (in a
    child process unless `edge_process` is off).

    One collection holds every tenant, partitioned by payload: `tenant` is a tenant-index
    keyword field, and every search filters on it and on the streams (docs/search.md).
    `:memory:` selects qdrant-client's in-process mode (for tests).
    """
    if config.qdrant_url == ":memory:":
        return QdrantClientIndex(QdrantClient(location=":memory:"), config.qdrant_collection, dim)
    if config.qdrant_url:
        client = QdrantClient(
            url=config.qdrant_url, api_key=config.qdrant_api_key or None, prefer_grpc=True
        )
        return QdrantClientIndex(client, config.qdrant_collection, dim)
    path = config.index_dir / "vectors"
    if (path / "edge_config.json").exists() and not shard_quantized(path):
        log.info(
            "the vector index keeps no int8 copy of its vectors (it was created before that "
            "was the default); `cairn recall reindex` rebuilds it with one",
            extra={"path": str(path)},
        )
    if config.edge_process:
        return EdgeWorkerIndex(path, dim)
    return QdrantEdgeIndex(path, dim)


def _check_embedder(config: SearchConfig, embedder: Embedder) -> None:
    """Refuses an index directory filled by another embedder; records it on first use."""
    path = config.index_dir / EMBEDDER_FILE
    if path.exists():
        recorded = json.loads(path.read_text())
        if recorded.get("embedder") != embedder.name:
            raise FailedPrecondition(
                f"the search index at {config.index_dir} was built with embedder "
                f"{recorded.get('embedder')!r}, not {embedder.name!r}: run `cairn recall "
                "reindex` with the new embedder, or start with the old one"
            )
        return
    config.index_dir.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"embedder": embedder.name, "dim": embedder.dim}) + "\n")


def open_projections(config: SearchConfig, *, rebuild: bool = False) -> Projections:
    """Both lanes and the embedder. `rebuild` (for a reindex) accepts an index directory
    filled by another embedder: the caller empties it before writing."""
    embedder = make_embedder(config)
    config.index_dir.mkdir(parents=True, exist_ok=True)
    try:
        lexical = LexicalIndex(config.index_dir / "lexical")
    except ValueError as error:
        if "LockBusy" in str(error):
            raise FailedPrecondition(
                f"the search index at {config.index_dir} is in use by another recall process "
                "(stop it first, or give each process its own --index-dir)"
            ) from None
        raise
    try:
        if rebuild:
            (config.index_dir / EMBEDDER_FILE).unlink(missing_ok=True)
            if not config.qdrant_url:
                _reset_edge_if_other_dim(config.index_dir / "vectors", embedder.dim)
        _check_embedder(config, embedder)
        vectors = open_vectors(config, embedder.dim)
    except BaseException:
        lexical.close()
        raise
    return Projections(lexical=lexical, vectors=vectors, embedder=embedder)


def _reset_edge_if_other_dim(path: Path, dim: int) -> None:
    """Before a rebuild with another embedder: an Edge shard of another dimension is removed
    (it would refuse to open); the rebuild refills it."""
    import shutil

    from recall_service.projections.vectors import shard_dim

    if (path / "edge_config.json").exists() and shard_dim(path) != dim:
        shutil.rmtree(path)
