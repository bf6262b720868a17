"""Prometheus metrics of a Cairn server, served over HTTP on their own port.

Every RPC is counted by method and status code and timed; services add their own
(compile cache, prompt rebuilds, log appends, index lag, embedding throughput). Metric
labels never carry ids, keys or content.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

log = logging.getLogger("cairn.metrics")

LATENCY_BUCKETS = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
)


@dataclass
class Metrics:
    """All metrics of one server process, in a registry of their own."""

    service: str
    registry: CollectorRegistry = field(default_factory=CollectorRegistry)

    def __post_init__(self) -> None:
        r = self.registry
        self.requests = Counter(
            "cairn_rpc_requests_total",
            "RPCs handled, by method and status code.",
            ["service", "method", "code"],
            registry=r,
        )
        self.latency = Histogram(
            "cairn_rpc_latency_seconds",
            "Time to handle an RPC, by method and status code.",
            ["service", "method", "code"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.compile_cache = Counter(
            "cairn_compile_cache_total",
            "CompileContext calls served from the stored prompt (hit) or recompiled (miss).",
            ["result"],
            registry=r,
        )
        self.prompt_rebuilds = Counter(
            "cairn_prompt_rebuilds_total", "System prompts rebuilt and stored.", registry=r
        )
        self.rebuild_fanout = Histogram(
            "cairn_prompt_rebuild_fanout",
            "Agents whose prompts one change rebuilt together.",
            buckets=(1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000),
            registry=r,
        )
        self.log_appends = Counter(
            "cairn_log_appends_total",
            "Records appended to recall streams, by kind.",
            ["kind"],
            registry=r,
        )
        self.index_lag_records = Gauge(
            "cairn_index_lag_records",
            "Records in the log not yet applied to a projection.",
            ["projection"],
            registry=r,
        )
        self.index_lag_seconds = Gauge(
            "cairn_index_lag_seconds",
            "Age of the oldest record not yet applied to a projection (0 when caught up).",
            ["projection"],
            registry=r,
        )
        self.vector_points_unoptimized = Gauge(
            "cairn_vector_points_unoptimized",
            "Vector points written since the vector index last built its search graph.",
            registry=r,
        )
        self.embedded_texts = Counter(
            "cairn_embedded_texts_total", "Texts embedded into vectors.", ["embedder"], registry=r
        )
        self.embedding_seconds = Counter(
            "cairn_embedding_seconds_total", "Time spent embedding.", ["embedder"], registry=r
        )

    def observe_rpc(self, method: str, code: str, seconds: float) -> None:
        """Counts and times one RPC."""
        self.requests.labels(self.service, method, code).inc()
        self.latency.labels(self.service, method, code).observe(seconds)

    def serve(self, host: str, port: int) -> None:
        """Serves /metrics on `host:port` from a background thread."""
        start_http_server(port, addr=host, registry=self.registry)
        log.info("metrics", extra={"service": self.service, "host": host, "port": port})
