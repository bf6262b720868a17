"""Embedders: the bundled default, the OpenAI-compatible HTTP client, client vectors."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from cairn_server.errors import FailedPrecondition, InvalidArgument, Unavailable
from recall_service.projections.documents import (
    IndexedRecord,
    IndexedText,
    TextSettings,
    indexed_texts,
)
from recall_service.projections.embedders import (
    ClientVectors,
    Embedder,
    OpenAIEmbedder,
    SumPooling,
    WordLlamaEmbedder,
    embed_indexed,
    embed_with_context,
    normalise_rows,
)


@pytest.fixture(scope="module")
def wordllama() -> WordLlamaEmbedder:
    return WordLlamaEmbedder()


def test_normalise_rows_gives_unit_rows_and_keeps_zero_rows_zero() -> None:
    out = normalise_rows([[3.0, 4.0], [0.0, 0.0]])
    assert out.dtype == np.float32
    assert out.tolist() == [[0.6000000238418579, 0.800000011920929], [0.0, 0.0]]


def test_wordllama_embeds_unit_float32_rows_of_its_dimension(wordllama: WordLlamaEmbedder) -> None:
    vectors = wordllama.embed(["I went hiking with my dog", "the quarterly report is due"])
    assert isinstance(wordllama, Embedder)
    assert wordllama.name == "wordllama-l2_supercat-256"
    assert vectors.shape == (2, 256)
    assert vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)


def test_wordllama_is_deterministic_and_batch_independent(wordllama: WordLlamaEmbedder) -> None:
    texts = ["a walk in the park", "sourdough bread", "my sister's wedding"]
    together = wordllama.embed(texts)
    apart = np.concatenate([wordllama.embed([t]) for t in texts])
    assert np.array_equal(together, wordllama.embed(texts))
    assert np.allclose(together, apart, atol=1e-6)


def test_wordllama_ranks_a_paraphrase_above_an_unrelated_text(wordllama: WordLlamaEmbedder) -> None:
    q, near, far = wordllama.embed(["adopting a puppy", "we got a new dog", "tax return forms"])
    assert float(q @ near) > float(q @ far)


def test_wordllama_matches_the_librarys_own_mean_pooling(wordllama: WordLlamaEmbedder) -> None:
    import wordllama as library

    reference = library.WordLlama.load(
        config="l2_supercat",
        dim=256,
        cache_dir=Path(library.__file__).parent,
        disable_download=True,
    )
    texts = ["short", "a much longer text about a trip to the mountains last summer", "", "x"]
    expected = normalise_rows(reference.embed(texts, norm=False))
    assert np.allclose(wordllama.embed(texts), expected, atol=1e-6)
    assert wordllama.embed([""]).tolist() == [[0.0] * 256]


def test_wordllama_embeds_nothing_to_an_empty_matrix(wordllama: WordLlamaEmbedder) -> None:
    assert wordllama.embed([]).shape == (0, 256)


def test_wordllama_loads_without_any_network(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("the embedder tried to open a network connection")

    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket.socket, "connect", refuse)
    assert WordLlamaEmbedder().embed(["offline"]).shape == (1, 256)


def test_truncated_wordllama_has_the_smaller_dimension() -> None:
    embedder = WordLlamaEmbedder(dim=64)
    assert embedder.dim == 64
    assert embedder.embed(["hello"]).shape == (1, 64)


def test_context_weight_zero_embeds_the_body_alone(wordllama: WordLlamaEmbedder) -> None:
    body = wordllama.embed(["my cat"])
    assert np.array_equal(embed_with_context(wordllama, ["my cat"], ["a dog"], 0.0), body)
    mixed = embed_with_context(wordllama, ["my cat"], ["a dog"], 1.0)
    expected = normalise_rows(body + wordllama.embed(["a dog"]))
    assert np.allclose(mixed, expected, atol=1e-6)


def test_token_sums_add_up_to_the_vector_of_the_texts_together(
    wordllama: WordLlamaEmbedder,
) -> None:
    sums = wordllama.token_sums(["red bike", "blue car"])
    assert isinstance(wordllama, SumPooling)
    together = wordllama.embed(["red bike blue car"])
    assert np.allclose(normalise_rows(sums.sum(axis=0, keepdims=True)), together, atol=1e-6)


def test_embed_indexed_builds_the_context_from_neighbour_bodies(
    wordllama: WordLlamaEmbedder,
) -> None:
    records = [
        IndexedRecord("t", "s", i, "Ana", 1683554160.0, text)
        for i, text in enumerate(["we adopted a dog", "what breed?", "a beagle puppy"], start=1)
    ]
    settings = TextSettings(with_date=False, neighbours_before=1, neighbours_after=1)
    texts = indexed_texts(records, settings)
    vectors = embed_indexed(wordllama, texts, context_weight=0.5)
    body = wordllama.embed(["Ana: what breed?"])
    context = wordllama.embed(["Ana: we adopted a dog Ana: a beagle puppy"])
    assert np.allclose(vectors[1], normalise_rows(body + 0.5 * context)[0], atol=1e-5)
    assert np.array_equal(
        embed_indexed(wordllama, texts, 0.0), wordllama.embed([t.body for t in texts])
    )


def test_embed_indexed_counts_the_date_in_the_context(wordllama: WordLlamaEmbedder) -> None:
    records = [IndexedRecord("t", "s", 1, "Ana", 1683554160.0, "hello")]
    texts = indexed_texts(records, TextSettings(with_date=True))
    assert texts[0].date == "8 May 2023"
    vectors = embed_indexed(wordllama, texts, context_weight=1.0)
    expected = normalise_rows(wordllama.embed(["Ana: hello"]) + wordllama.embed(["8 May 2023"]))
    assert np.allclose(vectors, expected, atol=1e-5)


def test_embed_indexed_embeds_the_context_text_for_other_embedders(server: str) -> None:
    embedder = OpenAIEmbedder(server, "tiny", dim=3)
    texts = [IndexedText("ab", "abcd", neighbours=(1,)), IndexedText("abcd")]
    vectors = embed_indexed(embedder, texts, context_weight=1.0)
    body, context = normalise_rows([[2.0, 0.0, 1.0]]), normalise_rows([[4.0, 0.0, 1.0]])
    assert np.allclose(vectors[0], normalise_rows(body + context)[0])
    assert [r["body"]["input"] for r in FakeEmbeddings.requests] == [["ab", "abcd"], ["abcd", ""]]


# -- OpenAI-compatible HTTP -----------------------------------------------------------------


class FakeEmbeddings(BaseHTTPRequestHandler):
    """Answers /v1/embeddings with vectors derived from each text's length, in reverse order."""

    requests: list[dict[str, Any]] = []
    status = 200

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        FakeEmbeddings.requests.append(
            {"path": self.path, "auth": self.headers.get("Authorization"), "body": body}
        )
        if FakeEmbeddings.status != 200:
            self.send_response(FakeEmbeddings.status)
            self.end_headers()
            self.wfile.write(b"overloaded")
            return
        data = [
            {"index": i, "embedding": [float(len(text)), 0.0, 1.0], "object": "embedding"}
            for i, text in enumerate(body["input"])
        ]
        payload = json.dumps({"data": list(reversed(data)), "model": body["model"]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, format: str, *args: Any) -> None:
        return


@pytest.fixture
def server() -> Iterator[str]:
    FakeEmbeddings.requests = []
    FakeEmbeddings.status = 200
    httpd = HTTPServer(("127.0.0.1", 0), FakeEmbeddings)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_port}/v1"
    httpd.shutdown()
    httpd.server_close()


def test_http_embedder_batches_orders_by_index_and_normalises(server: str) -> None:
    embedder = OpenAIEmbedder(server, "tiny", dim=3, api_key="sk-test", batch_size=2)
    vectors = embedder.embed(["abc", "a", "abcd"])
    embedder.close()
    assert embedder.name == "openai:tiny"
    assert [r["body"]["input"] for r in FakeEmbeddings.requests] == [["abc", "a"], ["abcd"]]
    assert {r["path"] for r in FakeEmbeddings.requests} == {"/v1/embeddings"}
    assert {r["auth"] for r in FakeEmbeddings.requests} == {"Bearer sk-test"}
    assert {r["body"]["model"] for r in FakeEmbeddings.requests} == {"tiny"}
    expected = normalise_rows([[3.0, 0.0, 1.0], [1.0, 0.0, 1.0], [4.0, 0.0, 1.0]])
    assert np.allclose(vectors, expected)


def test_http_embedder_rejects_a_wrong_dimension(server: str) -> None:
    embedder = OpenAIEmbedder(server, "tiny", dim=4)
    with pytest.raises(
        FailedPrecondition, match="returned 3-dim vectors; the index is configured for 4"
    ):
        embedder.embed(["x"])


def test_http_embedder_reports_an_http_error_as_unavailable(server: str) -> None:
    FakeEmbeddings.status = 503
    embedder = OpenAIEmbedder(server, "tiny", dim=3)
    with pytest.raises(Unavailable, match="answered HTTP 503: overloaded"):
        embedder.embed(["x"])


def test_http_embedder_reports_a_refused_connection_as_unavailable() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    embedder = OpenAIEmbedder(f"http://127.0.0.1:{port}/v1", "tiny", dim=3, timeout_s=2)
    with pytest.raises(Unavailable, match="failed"):
        embedder.embed(["x"])


def test_http_embedder_sends_nothing_for_no_texts(server: str) -> None:
    assert OpenAIEmbedder(server, "tiny", dim=3).embed([]).shape == (0, 3)
    assert FakeEmbeddings.requests == []


def test_http_embedder_rejects_a_zero_batch_size() -> None:
    with pytest.raises(InvalidArgument, match=r"embedder\.batch_size: must be >= 1, got 0"):
        OpenAIEmbedder("http://127.0.0.1:9/v1", "tiny", dim=3, batch_size=0)


# -- client vectors -------------------------------------------------------------------------


def test_client_vectors_are_normalised() -> None:
    out = ClientVectors(dim=2).check([[3.0, 4.0], [0.0, -2.0]])
    assert out.tolist() == [[0.6000000238418579, 0.800000011920929], [0.0, -1.0]]


@pytest.mark.parametrize(
    ("vectors", "message"),
    [
        ([[1.0, 2.0, 3.0]], "vector: must have 2 dimensions, got 3"),
        ([[1.0]], "vector: must have 2 dimensions, got 1"),
        ([[0.0, 0.0]], "vector: must not be all zeros"),
        ([[float("nan"), 1.0]], "vector: must hold finite numbers only"),
        ([[float("inf"), 1.0]], "vector: must hold finite numbers only"),
        ([[1.0, 0.0], [1.0, 0.0, 0.0]], r"vector\[1\]: must have 2 dimensions, got 3"),
    ],
)
def test_client_vectors_reject_bad_input_naming_the_row(
    vectors: list[list[float]], message: str
) -> None:
    with pytest.raises(InvalidArgument, match=message):
        ClientVectors(dim=2).check(vectors)


def test_client_vectors_cannot_embed_text() -> None:
    with pytest.raises(FailedPrecondition, match="send a query vector"):
        ClientVectors(dim=2).embed(["text"])


def test_client_vectors_need_a_positive_dimension() -> None:
    with pytest.raises(InvalidArgument, match=r"embedder\.dim: must be >= 1, got 0"):
        ClientVectors(dim=0)
