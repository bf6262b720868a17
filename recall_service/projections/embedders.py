"""Embedders behind one interface: the bundled offline default, an OpenAI-compatible HTTP
endpoint, and vectors supplied by the client.

Every embedder returns a float32 array of shape `(len(texts), dim)` whose rows have unit
length (a zero row stays zero: it matches nothing rather than everything). No embedder here
downloads anything: the default reads only the weights shipped inside the `wordllama` wheel.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import httpx
import numpy as np
import numpy.typing as npt

from cairn_server.errors import FailedPrecondition, InvalidArgument, Unavailable

Vectors = npt.NDArray[np.float32]


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into unit-length vectors of a fixed dimension."""

    @property
    def name(self) -> str:
        """A stable name, recorded beside an index so a change of model is noticed."""
        ...

    @property
    def dim(self) -> int:
        """The vector dimension."""
        ...

    def embed(self, texts: Sequence[str]) -> Vectors:
        """One unit-length float32 row per text."""
        ...


def normalise_rows(matrix: npt.ArrayLike) -> Vectors:
    """Rows scaled to unit length, as float32; all-zero rows stay zero."""
    array = np.asarray(matrix, dtype=np.float32)
    if array.ndim != 2:
        raise ValueError(f"expected a 2-d array, got shape {array.shape}")
    norms = np.linalg.norm(array, axis=1, keepdims=True)
    out: Vectors = np.divide(array, norms, out=np.zeros_like(array), where=norms > 0)
    return out


class WordLlamaEmbedder:
    """The bundled default: WordLlama `l2_supercat` (256 dims) from the weights in its wheel.

    WordLlama averages static token embeddings distilled from an LLM, so it embeds thousands
    of texts per second on one core, at a quality well below a transformer encoder.
    """

    def __init__(self, dim: int = 256, batch_size: int = 256) -> None:
        import wordllama

        package_dir = Path(wordllama.__file__).parent
        # The weights ship inside the wheel; cache_dir points there too, downloads are off.
        self._model: Any = wordllama.WordLlama.load(
            config="l2_supercat",
            dim=256,
            trunc_dim=None if dim == 256 else dim,
            cache_dir=package_dir,
            disable_download=True,
        )
        self._dim = dim
        self._batch_size = batch_size

    @property
    def name(self) -> str:
        """`wordllama-l2_supercat-<dim>`."""
        return f"wordllama-l2_supercat-{self._dim}"

    @property
    def dim(self) -> int:
        """The vector dimension (256 unless truncated)."""
        return self._dim

    def embed(self, texts: Sequence[str]) -> Vectors:
        """Unit-length embeddings of `texts`."""
        if not texts:
            return np.zeros((0, self._dim), dtype=np.float32)
        raw = self._model.embed(list(texts), norm=False, batch_size=self._batch_size)
        return normalise_rows(raw)


class OpenAIEmbedder:
    """A client of an OpenAI-compatible `POST {base_url}/embeddings` endpoint.

    `base_url` is e.g. `http://localhost:8080/v1`. Texts go in batches of `batch_size`;
    a failed call raises `Unavailable` naming the endpoint and the HTTP status.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        dim: int,
        api_key: str | None = None,
        batch_size: int = 64,
        timeout_s: float = 30.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        if batch_size < 1:
            raise InvalidArgument("embedder.batch_size", f"must be >= 1, got {batch_size}")
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._url = base_url.rstrip("/") + "/embeddings"
        self._model = model
        self._dim = dim
        self._batch_size = batch_size
        self._client = httpx.Client(headers=headers, timeout=timeout_s, transport=transport)

    @property
    def name(self) -> str:
        """`openai:<model>`."""
        return f"openai:{self._model}"

    @property
    def dim(self) -> int:
        """The configured dimension; every returned vector is checked against it."""
        return self._dim

    def embed(self, texts: Sequence[str]) -> Vectors:
        """Unit-length embeddings of `texts`, fetched batch by batch."""
        rows: list[Vectors] = [np.zeros((0, self._dim), dtype=np.float32)]
        for start in range(0, len(texts), self._batch_size):
            rows.append(self._embed_batch(list(texts[start : start + self._batch_size])))
        return np.concatenate(rows)

    def _embed_batch(self, batch: list[str]) -> Vectors:
        try:
            response = self._client.post(self._url, json={"model": self._model, "input": batch})
        except httpx.HTTPError as error:
            raise Unavailable(f"embedding endpoint {self._url} failed: {error}") from error
        if response.status_code != 200:
            raise Unavailable(
                f"embedding endpoint {self._url} answered HTTP {response.status_code}: "
                f"{response.text[:200]}"
            )
        data = sorted(response.json()["data"], key=lambda item: int(item["index"]))
        if len(data) != len(batch):
            raise Unavailable(
                f"embedding endpoint {self._url} returned {len(data)} vectors "
                f"for {len(batch)} texts"
            )
        matrix = np.asarray([item["embedding"] for item in data], dtype=np.float32)
        if matrix.shape[1] != self._dim:
            raise FailedPrecondition(
                f"embedding endpoint {self._url} returned {matrix.shape[1]}-dim vectors; "
                f"the index is configured for {self._dim}"
            )
        return normalise_rows(matrix)

    def close(self) -> None:
        """Closes the HTTP connection pool."""
        self._client.close()


class ClientVectors:
    """Vectors supplied by the client on `Write` (and with each query): checked and normalised.

    There is no model, so `embed` refuses: a stream that uses client vectors needs the client
    to send a query vector too.
    """

    def __init__(self, dim: int, name: str = "client") -> None:
        if dim < 1:
            raise InvalidArgument("embedder.dim", f"must be >= 1, got {dim}")
        self._dim = dim
        self._name = name

    @property
    def name(self) -> str:
        """`client:<name>`."""
        return f"client:{self._name}"

    @property
    def dim(self) -> int:
        """The dimension every supplied vector must have."""
        return self._dim

    def embed(self, texts: Sequence[str]) -> Vectors:
        """Always fails: client vectors cannot embed text."""
        raise FailedPrecondition(
            f"the index uses client-supplied {self._dim}-dim vectors; send a query vector"
        )

    def check(self, vectors: Sequence[Sequence[float]], field: str = "vector") -> Vectors:
        """Validated, unit-length rows; `InvalidArgument` names the bad row and why."""
        out = np.zeros((len(vectors), self._dim), dtype=np.float32)
        for i, vector in enumerate(vectors):
            row = np.asarray(vector, dtype=np.float64)
            where = f"{field}[{i}]" if len(vectors) > 1 else field
            if row.ndim != 1 or row.shape[0] != self._dim:
                raise InvalidArgument(where, f"must have {self._dim} dimensions, got {row.size}")
            if not np.all(np.isfinite(row)):
                raise InvalidArgument(where, "must hold finite numbers only")
            norm = float(np.linalg.norm(row))
            if norm == 0.0:
                raise InvalidArgument(where, "must not be all zeros")
            out[i] = (row / norm).astype(np.float32)
        return out


def embed_with_context(
    embedder: Embedder, bodies: Sequence[str], contexts: Sequence[str], context_weight: float
) -> Vectors:
    """One vector per record: `normalise(e(body) + context_weight * e(context))`.

    Embedding the context apart and adding it with a weight keeps a record's own words
    dominant however long its context is; weight 0 embeds the body alone.
    """
    body_vectors = embedder.embed(bodies)
    if context_weight == 0.0:
        return body_vectors
    return normalise_rows(body_vectors + context_weight * embedder.embed(contexts))
