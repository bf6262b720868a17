"""Typed errors for failed calls: one exception class per gRPC status code a caller handles.

Every failed call of `cairn.Client` and `cairn.AsyncClient` raises a `CairnError` carrying the
gRPC `code` and the server's `details` (a message a person can act on). Catch the subclass for
the case you handle:

    try:
        client.state.update_block(block.id, value=text, expected_version=block.version)
    except cairn.errors.Aborted:
        ...  # someone else changed the block first: re-read it and try again
    except cairn.errors.InvalidArgument as error:
        print(error.field_violations)  # [FieldViolation(field='block.value', description=...)]
"""

from __future__ import annotations

from dataclasses import dataclass

import grpc
from google.rpc import error_details_pb2
from grpc_status import rpc_status

__all__ = [
    "Aborted",
    "AlreadyExists",
    "CairnError",
    "Cancelled",
    "DeadlineExceeded",
    "FailedPrecondition",
    "FieldViolation",
    "Internal",
    "InvalidArgument",
    "NotFound",
    "PermissionDenied",
    "ResourceExhausted",
    "Unauthenticated",
    "Unavailable",
    "Unimplemented",
    "from_rpc_error",
]


@dataclass(frozen=True, slots=True)
class FieldViolation:
    """One bad field of a request (from the server's `google.rpc.BadRequest` detail)."""

    field: str
    description: str


class CairnError(Exception):
    """A call failed. `code` is the gRPC status code, `details` the server's message, and
    `attempts` how many times the call was sent (more than 1 after retries)."""

    def __init__(self, code: grpc.StatusCode, details: str, *, attempts: int = 1) -> None:
        message = f"{code.name}: {details}" if details else code.name
        super().__init__(f"{message} (after {attempts} attempts)" if attempts > 1 else message)
        self.code = code
        self.details = details
        self.attempts = attempts


class InvalidArgument(CairnError):
    """A request field is malformed; `field_violations` names each bad field."""

    def __init__(
        self,
        code: grpc.StatusCode,
        details: str,
        *,
        attempts: int = 1,
        field_violations: tuple[FieldViolation, ...] = (),
    ) -> None:
        super().__init__(code, details, attempts=attempts)
        self.field_violations = field_violations


class NotFound(CairnError):
    """No such resource in the caller's tenant (another tenant's resources answer this too)."""


class AlreadyExists(CairnError):
    """The resource, a unique name, or an idempotency key used for different content exists."""


class Aborted(CairnError):
    """A concurrent change won (`expected_version` or `base_context_version` is stale):
    re-read and decide again; the call changed nothing."""


class FailedPrecondition(CairnError):
    """The resource is not in the state the call needs; the details say which state."""


class PermissionDenied(CairnError):
    """The principal may not perform the action; the details name both."""


class Unauthenticated(CairnError):
    """The API key is missing, malformed, unknown or revoked."""


class ResourceExhausted(CairnError):
    """A size limit was exceeded, or a watcher fell too far behind."""


class Unavailable(CairnError):
    """The server could not be reached or is shutting down; idempotent calls were retried."""


class DeadlineExceeded(CairnError):
    """The call did not finish within its deadline (the whole budget, retries included)."""


class Internal(CairnError):
    """A server fault."""


class Unimplemented(CairnError):
    """The server does not know this RPC (it runs an older contract)."""


class Cancelled(CairnError):
    """The call was cancelled."""


_CLASSES: dict[grpc.StatusCode, type[CairnError]] = {
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgument,
    grpc.StatusCode.NOT_FOUND: NotFound,
    grpc.StatusCode.ALREADY_EXISTS: AlreadyExists,
    grpc.StatusCode.ABORTED: Aborted,
    grpc.StatusCode.FAILED_PRECONDITION: FailedPrecondition,
    grpc.StatusCode.PERMISSION_DENIED: PermissionDenied,
    grpc.StatusCode.UNAUTHENTICATED: Unauthenticated,
    grpc.StatusCode.RESOURCE_EXHAUSTED: ResourceExhausted,
    grpc.StatusCode.UNAVAILABLE: Unavailable,
    grpc.StatusCode.DEADLINE_EXCEEDED: DeadlineExceeded,
    grpc.StatusCode.INTERNAL: Internal,
    grpc.StatusCode.UNIMPLEMENTED: Unimplemented,
    grpc.StatusCode.CANCELLED: Cancelled,
}


def _field_violations(error: grpc.RpcError) -> tuple[FieldViolation, ...]:
    """The BadRequest detail of `grpc-status-details-bin`, when the server attached one."""
    try:
        status = rpc_status.from_call(error)  # type: ignore[arg-type]
    except (ValueError, AttributeError):
        # A status detail that contradicts the code or message is ignored, not trusted.
        return ()
    if status is None:
        return ()
    found: list[FieldViolation] = []
    for detail in status.details:
        if detail.Is(error_details_pb2.BadRequest.DESCRIPTOR):
            bad_request = error_details_pb2.BadRequest()
            detail.Unpack(bad_request)
            found.extend(
                FieldViolation(v.field, v.description) for v in bad_request.field_violations
            )
    return tuple(found)


def from_rpc_error(error: grpc.RpcError, *, attempts: int = 1) -> CairnError:
    """The typed error for a failed call (sync `grpc.RpcError` or `grpc.aio.AioRpcError`)."""
    code_of = getattr(error, "code", None)
    details_of = getattr(error, "details", None)
    code = code_of() if callable(code_of) else grpc.StatusCode.UNKNOWN
    if not isinstance(code, grpc.StatusCode):
        code = grpc.StatusCode.UNKNOWN
    details = (details_of() if callable(details_of) else None) or ""
    cls = _CLASSES.get(code, CairnError)
    if cls is InvalidArgument:
        return InvalidArgument(
            code, details, attempts=attempts, field_violations=_field_violations(error)
        )
    return cls(code, details, attempts=attempts)
