"""Opening the projections from the server's settings: what it says about an older shard."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from recall_service.projections.vectors import QdrantEdgeIndex, shard_quantized
from recall_service.search_setup import SearchConfig, open_vectors

HINT = (
    "the vector index keeps no int8 copy of its vectors (it was created before that was the "
    "default); `cairn recall reindex` rebuilds it with one"
)


def test_an_unquantized_shard_is_named_until_a_reset_rebuilds_it_with_the_copy(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "index" / "vectors"
    QdrantEdgeIndex(path, 3, quantize=False).close()
    config = SearchConfig(tmp_path / "index", edge_process=False)
    with caplog.at_level(logging.INFO, logger="cairn.recall.search"):
        open_vectors(config, 3).close()
    assert [r.getMessage() for r in caplog.records] == [HINT]
    assert not shard_quantized(path)

    index = QdrantEdgeIndex(path, 3)
    index.reset()  # what `cairn recall reindex` does to the vector lane first
    index.close()
    assert shard_quantized(path)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="cairn.recall.search"):
        open_vectors(config, 3).close()
    assert caplog.records == []
