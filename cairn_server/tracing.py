"""OpenTelemetry traces, sent over OTLP when an endpoint is configured.

With an endpoint, every RPC gets a server span (the gRPC instrumentation) and the work
inside it gets child spans (`span(...)`: store, compile, embed, index). Without one, the
tracer is OpenTelemetry's no-op and `span` costs next to nothing.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from opentelemetry import trace

_tracer = trace.get_tracer("cairn")


class _Export:
    """Spans cost a few microseconds even with the no-op tracer: skip them unless exporting."""

    enabled = False


def setup(service: str, endpoint: str) -> list[Any]:
    """Configures export to `endpoint`; returns the gRPC server interceptors to install."""
    if not endpoint:
        return []
    _Export.enabled = True
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
    from opentelemetry.instrumentation.grpc import aio_server_interceptor
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    provider = TracerProvider(resource=Resource.create({"service.name": f"cairn-{service}"}))
    provider.add_span_processor(
        BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint, insecure=True))
    )
    trace.set_tracer_provider(provider)
    return [aio_server_interceptor()]  # type: ignore[no-untyped-call]


@contextmanager
def span(name: str, **attributes: str | int | float | bool) -> Iterator[None]:
    """A child span around a piece of work (nothing when traces are not exported)."""
    if not _Export.enabled:
        yield
        return
    with _tracer.start_as_current_span(name, attributes=attributes):
        yield


def enabled() -> bool:
    """True when spans are exported."""
    return _Export.enabled


def shutdown() -> None:
    """Flushes pending spans."""
    provider = trace.get_tracer_provider()
    flush = getattr(provider, "shutdown", None)
    if flush is not None:
        flush()
