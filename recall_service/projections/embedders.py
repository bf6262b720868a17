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
from recall_service.projections.documents import IndexedText

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

    def __init__(self, dim: int = 256, batch_size: int = 32) -> None:
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
        self._weights: npt.NDArray[np.float32] = np.ascontiguousarray(
            self._model.embedding[:, :dim], dtype=np.float32
        )
        self._vocab = int(self._weights.shape[0])
        self._tokenizer: Any = self._model.tokenizer
        self._tokenizer.no_padding()
        self._buffer: npt.NDArray[np.float32] = np.empty((0, dim), dtype=np.float32)

    @property
    def name(self) -> str:
        """`wordllama-l2_supercat-<dim>`."""
        return f"wordllama-l2_supercat-{self._dim}"

    @property
    def dim(self) -> int:
        """The vector dimension (256 unless truncated)."""
        return self._dim

    def embed(self, texts: Sequence[str]) -> Vectors:
        """Unit-length embeddings of `texts` (the normalised mean of their token vectors)."""
        return normalise_rows(self.token_sums(texts))

    def token_sums(self, texts: Sequence[str]) -> Vectors:
        """The sum of each text's token vectors, unnormalised (zero for an empty text).

        Normalising a sum gives the same unit vector as normalising the mean, and sums add:
        the vector of several texts together is the normalised sum of their sums.
        """
        # Computed without padding: WordLlama's own `embed` pads each mini-batch to its
        # longest text and gathers a (batch, length, dim) array. Gathering small batches into
        # one reused buffer avoids both the padding and the page faults of a fresh large array
        # per batch (about 3x faster; the same vectors, tested).
        sums = np.zeros((len(texts), self._dim), dtype=np.float32)
        if not texts:
            return sums
        encoded = self._tokenizer.encode_batch(list(texts), add_special_tokens=False)
        ids = [np.asarray(e.ids, dtype=np.int64) for e in encoded]
        lengths = np.array([len(i) for i in ids])
        for start in range(0, len(texts), self._batch_size):
            end = min(start + self._batch_size, len(texts))
            nonempty = np.flatnonzero(lengths[start:end])
            if not nonempty.size:
                continue
            flat = np.clip(np.concatenate(ids[start:end]), 0, self._vocab - 1)
            if flat.size > self._buffer.shape[0]:
                self._buffer = np.empty((flat.size, self._dim), dtype=np.float32)
            rows = np.take(self._weights, flat, axis=0, out=self._buffer[: flat.size])
            offsets = np.concatenate(([0], np.cumsum(lengths[start:end])[:-1]))[nonempty]
            sums[start + nonempty] = np.add.reduceat(rows, offsets, axis=0)
        return sums


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
    embedder: Embedder,
    bodies: Sequence[str],
    contexts: Sequence[str],
    context_weight: float = 1.0,
) -> Vectors:
    """One vector per record: `normalise(e(body) + context_weight * e(context))`.

    Embedding the context apart and adding it with a weight keeps a record's own words
    dominant however long its context is; weight 0 embeds the body alone. The default (1.0)
    is the best setting on LoCoMo's dev set (docs/search.md).
    """
    body_vectors = embedder.embed(bodies)
    if context_weight == 0.0:
        return body_vectors
    return normalise_rows(body_vectors + context_weight * embedder.embed(contexts))


@runtime_checkable
class SumPooling(Protocol):
    """An embedder whose vector of a text is the normalised sum of its token vectors."""

    def token_sums(self, texts: Sequence[str]) -> Vectors:
        """Unnormalised sums of token vectors, one row per text."""
        ...


def embed_indexed(
    embedder: Embedder, texts: Sequence[IndexedText], context_weight: float = 1.0
) -> Vectors:
    """One vector per indexed text: `normalise(e(body) + context_weight * e(context))`.

    For a sum-pooling embedder the context's vector is built from its neighbours' body sums
    (plus the date's), so each body is tokenised once; its context then counts every
    neighbour whole (`neighbour_max_chars` cuts only the lexical context). Other embedders
    embed the context text (`embed_with_context`).
    """
    if not isinstance(embedder, SumPooling):
        return embed_with_context(
            embedder, [t.body for t in texts], [t.context for t in texts], context_weight
        )
    sums = embedder.token_sums([t.body for t in texts])
    bodies = normalise_rows(sums)
    if context_weight == 0.0:
        return bodies
    context = np.zeros_like(sums)
    for i, text in enumerate(texts):
        if text.neighbours:
            context[i] = sums[list(text.neighbours)].sum(axis=0)
    dated = [i for i, t in enumerate(texts) if t.date]
    if dated:
        context[dated] += embedder.token_sums([texts[i].date for i in dated])
    return normalise_rows(bodies + context_weight * normalise_rows(context))
