"""Errors across a process boundary: a `CairnError` goes over as its class name and fields
and comes back as the same class, so the client sees the same status and message whichever
process raised it. Anything else comes back as `RemoteFailure` (the call ends INTERNAL; the
process that failed logged the traceback).
"""

from __future__ import annotations

from typing import Any

from cairn_server.errors import CairnError

Encoded = tuple[str, str, tuple[Any, ...], dict[str, Any]]


class RemoteFailure(RuntimeError):
    """An error that is not the caller's, raised in another process."""


def encode_error(error: BaseException) -> Encoded:
    """The error as plain, picklable data."""
    if isinstance(error, CairnError):
        return ("cairn", type(error).__name__, error.args, dict(vars(error)))
    return ("other", type(error).__name__, (str(error),), {})


def _error_classes() -> dict[str, type[CairnError]]:
    found: dict[str, type[CairnError]] = {}
    todo: list[type[CairnError]] = [CairnError]
    while todo:
        cls = todo.pop()
        found.setdefault(cls.__name__, cls)
        todo.extend(cls.__subclasses__())
    return found


def decode_error(encoded: Encoded) -> Exception:
    """The exception `encode_error` encoded: the same `CairnError` class with the same fields
    (the class must be imported here too), or `RemoteFailure`."""
    kind, name, args, state = encoded
    cls = _error_classes().get(name) if kind == "cairn" else None
    if cls is None:
        return RemoteFailure(f"{name}: {args[0] if args else ''}")
    error = cls.__new__(cls)
    Exception.__init__(error, *args)
    error.__dict__.update(state)
    return error
