"""The one wrapper every servicer method runs in: authentication, error mapping, logging."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import grpc

from cairn_server.auth import Authenticator, Principal
from cairn_server.errors import CairnError
from cairn_server.metrics import Metrics
from cairn_server.status import to_status

log = logging.getLogger("cairn.rpc")


Context = grpc.aio.ServicerContext[Any, Any]


def _metadata_value(context: Context, key: str) -> str | None:
    for name, value in context.invocation_metadata() or ():
        if name == key:
            return value.decode() if isinstance(value, bytes) else str(value)
    return None


class RpcGuard:
    """Authenticates each call, turns domain errors into gRPC status codes, and counts and
    times every call by method and code."""

    def __init__(self, authenticator: Authenticator, metrics: Metrics | None = None) -> None:
        self.authenticator = authenticator
        self.metrics = metrics

    @asynccontextmanager
    async def call(self, context: Context, method: str) -> AsyncIterator[Principal]:
        """Yields the caller's principal; aborts the call on any error raised inside."""
        start = time.perf_counter()
        principal: Principal | None = None
        code = "OK"
        try:
            principal = self.authenticator.authenticate(_metadata_value(context, "authorization"))
            yield principal
        except CairnError as error:
            code = error.code_name
            request_id = _metadata_value(context, "x-request-id") or uuid.uuid4().hex[:16]
            log.info(
                "rpc refused",
                extra={
                    "method": method,
                    "code": error.code_name,
                    "request_id": request_id,
                    "principal": principal.describe() if principal else None,
                    "error": error.message,
                    "ms": round((time.perf_counter() - start) * 1000, 3),
                },
            )
            await context.abort_with_status(to_status(error))
        except grpc.aio.AbortError:
            raise
        except asyncio.CancelledError:
            code = "CANCELLED"
            raise
        except Exception:
            code = "INTERNAL"
            request_id = _metadata_value(context, "x-request-id") or uuid.uuid4().hex[:16]
            log.exception(
                "rpc failed",
                extra={"method": method, "request_id": request_id, "code": "INTERNAL"},
            )
            await context.abort(
                grpc.StatusCode.INTERNAL, f"internal error (request id {request_id})"
            )
        finally:
            elapsed = time.perf_counter() - start
            if self.metrics is not None:
                self.metrics.observe_rpc(method, code, elapsed)
            if code == "OK" and log.isEnabledFor(logging.DEBUG):
                # The access log: who called what, how it ended; never keys or content.
                log.debug(
                    "rpc",
                    extra={
                        "method": method,
                        "code": code,
                        "request_id": _metadata_value(context, "x-request-id")
                        or uuid.uuid4().hex[:16],
                        "principal": principal.describe() if principal else None,
                        "ms": round(elapsed * 1000, 3),
                    },
                )
