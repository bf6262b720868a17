"""Domain errors. Domain code raises these; servicers map them to gRPC status codes.

Nothing here imports grpc: the mapping lives in `cairn_server.status`.
"""

from __future__ import annotations


class CairnError(Exception):
    """Base of every error a client may see; `message` is written for a person to act on."""

    code_name = "INTERNAL"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class InvalidArgument(CairnError):
    """A request field is malformed; `field` names it (dotted path)."""

    code_name = "INVALID_ARGUMENT"

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}" if field else message)
        self.field = field
        self.description = message


class NotFound(CairnError):
    """The named resource does not exist in the caller's tenant."""

    code_name = "NOT_FOUND"


class AlreadyExists(CairnError):
    """The resource (or a unique name) exists already."""

    code_name = "ALREADY_EXISTS"


class Aborted(CairnError):
    """A concurrent change won: retry from a fresh read."""

    code_name = "ABORTED"


class FailedPrecondition(CairnError):
    """The resource is not in the state the operation needs."""

    code_name = "FAILED_PRECONDITION"


class PermissionDenied(CairnError):
    """The principal may not perform the action."""

    code_name = "PERMISSION_DENIED"


class Unauthenticated(CairnError):
    """No valid credentials were presented."""

    code_name = "UNAUTHENTICATED"


class ResourceExhausted(CairnError):
    """A size or rate limit was exceeded."""

    code_name = "RESOURCE_EXHAUSTED"


class Unavailable(CairnError):
    """A dependency is down; the call may be retried."""

    code_name = "UNAVAILABLE"
