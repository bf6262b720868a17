"""The search process's metrics reach the server's: gauges as they are, counters by what they
grew, and a new search process that counts from zero again does not move them back."""

from __future__ import annotations

from cairn_server.metrics import Metrics
from recall_service.index_client import set_samples
from recall_service.index_process import metric_samples


def child_metrics(lag: float, unoptimized: float, texts: float, seconds: float) -> Metrics:
    """The metrics an indexer in the search process would have set."""
    metrics = Metrics("recall")
    metrics.index_lag_records.labels("lexical").set(lag)
    metrics.index_lag_records.labels("vector").set(lag + 1)
    metrics.index_lag_seconds.labels("lexical").set(0.5)
    metrics.vector_points_unoptimized.set(unoptimized)
    metrics.embedded_texts.labels("wordllama").inc(texts)
    metrics.embedding_seconds.labels("wordllama").inc(seconds)
    metrics.log_appends.labels("message").inc(7)  # not the indexer's: not forwarded
    return metrics


def test_samples_are_set_on_the_server_and_counters_move_by_their_growth() -> None:
    server = Metrics("recall")
    counted: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    value = server.registry.get_sample_value
    set_samples(server, counted, metric_samples(child_metrics(5, 40, 100, 0.25)))
    assert value("cairn_index_lag_records", {"projection": "lexical"}) == 5.0
    assert value("cairn_index_lag_records", {"projection": "vector"}) == 6.0
    assert value("cairn_index_lag_seconds", {"projection": "lexical"}) == 0.5
    assert value("cairn_vector_points_unoptimized") == 40.0
    assert value("cairn_embedded_texts_total", {"embedder": "wordllama"}) == 100.0
    assert value("cairn_embedding_seconds_total", {"embedder": "wordllama"}) == 0.25
    assert value("cairn_log_appends_total", {"kind": "message"}) is None
    # The same child later: the counters grew by 30 texts and 0.5 s.
    set_samples(server, counted, metric_samples(child_metrics(0, 70, 130, 0.75)))
    assert value("cairn_index_lag_records", {"projection": "lexical"}) == 0.0
    assert value("cairn_vector_points_unoptimized") == 70.0
    assert value("cairn_embedded_texts_total", {"embedder": "wordllama"}) == 130.0
    assert value("cairn_embedding_seconds_total", {"embedder": "wordllama"}) == 0.75
    # A new child counts from zero: with `counted` emptied, its 20 texts add to the total.
    counted.clear()
    set_samples(server, counted, metric_samples(child_metrics(0, 0, 20, 0.125)))
    assert value("cairn_embedded_texts_total", {"embedder": "wordllama"}) == 150.0
    assert value("cairn_embedding_seconds_total", {"embedder": "wordllama"}) == 0.875
