"""Running a Cairn gRPC server: health, reflection, signals and graceful shutdown."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import threading
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from cairn_server import tracing
from cairn_server.metrics import Metrics
from cairn_server.settings import ServerSettings, is_loopback

log = logging.getLogger("cairn.server")


# Seconds a stopping server may spend closing its stores after the grace time.
SHUTDOWN_ALLOWANCE_S = 20.0


def _force_exit() -> None:
    log.error("shutdown did not finish in time; exiting without it")
    logging.shutdown()
    os._exit(1)


class StartupError(Exception):
    """The server refuses to start; the message says why."""


@dataclass
class Hooks:
    """Service-specific parts of a server: what to register, and what to close on stop."""

    register: Callable[[grpc.aio.Server], Sequence[str]]
    on_start: Callable[[], Awaitable[None]] | None = None
    on_stop: list[Callable[[], Awaitable[None] | None]] = field(default_factory=list)


def check_security(settings: ServerSettings, service: str) -> None:
    """Refuses `--insecure-local` off loopback; warns when it is on."""
    if settings.insecure_local:
        if not is_loopback(settings.host):
            raise StartupError(
                f"--insecure-local serves without authentication and is only allowed on a "
                f"loopback address; refusing to bind {settings.host!r}"
            )
        log.warning(
            "serving WITHOUT authentication (--insecure-local): every call runs as the local admin",
            extra={"service": service, "host": settings.host},
        )
    if (settings.tls_cert is None) != (settings.tls_key is None):
        raise StartupError("--tls-cert and --tls-key must be given together")


def server_options(settings: ServerSettings) -> list[tuple[str, int]]:
    """Channel options: message size limits, and no SO_REUSEPORT so a busy port fails."""
    return [
        ("grpc.max_receive_message_length", settings.max_message_bytes),
        ("grpc.max_send_message_length", max(settings.max_message_bytes, 64 * 1024 * 1024)),
        ("grpc.so_reuseport", 0),
    ]


async def run_server(
    settings: ServerSettings, service: str, hooks: Hooks, metrics: Metrics | None = None
) -> None:
    """Serves until SIGTERM or SIGINT, then lets in-flight calls finish within the grace time."""
    check_security(settings, service)
    interceptors = tracing.setup(service, settings.otlp_endpoint)
    server = grpc.aio.server(options=server_options(settings), interceptors=interceptors)
    names = list(hooks.register(server))
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    reflection.enable_server_reflection(
        [
            *names,
            health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
            reflection.SERVICE_NAME,
        ],
        server,
    )
    address = f"{settings.host}:{settings.port}"
    if settings.tls_cert is not None and settings.tls_key is not None:
        credentials = grpc.ssl_server_credentials(
            [(settings.tls_key.read_bytes(), settings.tls_cert.read_bytes())]
        )
        port = server.add_secure_port(address, credentials)
    else:
        port = server.add_insecure_port(address)
    if port == 0:
        raise StartupError(f"could not bind {address}: is the port already in use?")
    if metrics is not None and settings.metrics_port:
        try:
            metrics.serve(settings.metrics_host or settings.host, settings.metrics_port)
        except OSError as error:
            raise StartupError(
                f"could not serve metrics on port {settings.metrics_port}: {error.strerror}; "
                "pass --metrics-port 0 to turn metrics off"
            ) from None
    # Signals are caught before anything starts: a SIGTERM from here on (as soon as the
    # "serving" line, or earlier) stops the server gracefully instead of killing it.
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    if hooks.on_start is not None:
        await hooks.on_start()
    await server.start()
    for name in ["", *names]:
        await health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
    log.info(
        "serving",
        extra={
            "service": service,
            "host": settings.host,
            "port": port,
            "data_dir": str(settings.resolved_data_dir()),
            # "uvloop" or "asyncio": the loop this server really runs on.
            "event_loop": type(loop).__module__.split(".")[0],
        },
    )
    serving = asyncio.ensure_future(server.wait_for_termination())
    stopping = asyncio.ensure_future(stop.wait())
    await asyncio.wait({serving, stopping}, return_when=asyncio.FIRST_COMPLETED)
    log.info("stopping", extra={"service": service, "grace_seconds": settings.grace_seconds})
    # Shutdown has a bound: past the grace time and the closing allowance, the process ends
    # anyway (everything acknowledged is already durable), so a stuck call or a stop that
    # gRPC never finishes cannot keep a stopped server alive.
    watchdog = threading.Timer(settings.grace_seconds + SHUTDOWN_ALLOWANCE_S, _force_exit)
    watchdog.daemon = True
    watchdog.start()
    await health_servicer.enter_graceful_shutdown()
    await server.stop(settings.grace_seconds)
    stopping.cancel()
    for close in hooks.on_stop:
        result = close()
        if result is not None:
            await result
    tracing.shutdown()
    watchdog.cancel()
    log.info("stopped", extra={"service": service})
