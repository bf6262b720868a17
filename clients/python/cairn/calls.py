"""What one client method sends, described as data, so the sync and async clients share it.

The request-building modules (`agent_calls`, `block_calls`, `step_calls`, `memfs_calls`,
`recall_calls`, `proof_calls`) turn a method's arguments into one of these descriptions; the
transports (`sync_transport`, `async_transport`) send them, retrying, paging and mapping
errors the same way. A method is written once, as its builder, and appears on both clients.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Generic, Literal, TypeVar

from google.protobuf import field_mask_pb2
from google.protobuf.message import Message as ProtoMessage

__all__ = [
    "DEFAULT_PAGE_SIZE",
    "Call",
    "Page",
    "Paged",
    "Service",
    "Streamed",
    "bind",
    "field_mask",
    "paged",
]

T = TypeVar("T")
M = TypeVar("M", bound=Callable[..., Any])

Service = Literal["state", "recall"]

# Items per page of a list, unless the method is given `page_size` (the servers take 1-1000).
DEFAULT_PAGE_SIZE = 100


@dataclass(frozen=True, slots=True)
class Call(Generic[T]):
    """One unary RPC: the service and method, the request, how to read the reply, whether
    sending it twice is safe (`idempotent`), and a timeout overriding the client default."""

    service: Service
    method: str
    request: ProtoMessage
    parse: Callable[[Any], T]
    idempotent: bool
    timeout: float | None = None


@dataclass(frozen=True, slots=True)
class Page(Generic[T]):
    """One page of a list: its items and the token of the next page ("" after the last)."""

    items: list[T]
    next_page_token: str


@dataclass(frozen=True, slots=True)
class Paged(Generic[T]):
    """A list RPC: `page(token)` is the call for one page (token "" for the first)."""

    page: Callable[[str], Call[Page[T]]]


@dataclass(frozen=True, slots=True)
class Streamed(Generic[T]):
    """A server-streaming RPC; `timeout` None means the stream has no deadline."""

    service: Service
    method: str
    request: ProtoMessage
    parse: Callable[[Any], T]
    timeout: float | None = None


def paged(
    service: Service,
    method: str,
    request: Callable[[str], ProtoMessage],
    items: Callable[[Any], list[T]],
    timeout: float | None,
) -> Paged[T]:
    """A read-only list RPC whose reply has `next_page_token`; `request(token)` builds the
    request for one page and `items(reply)` reads its items."""

    def page(token: str) -> Call[Page[T]]:
        return Call(
            service,
            method,
            request(token),
            lambda reply: Page(items(reply), reply.next_page_token),
            idempotent=True,
            timeout=timeout,
        )

    return Paged(page)


def field_mask(fields: Iterable[tuple[str, object]]) -> field_mask_pb2.FieldMask:
    """A field mask naming the fields of an update that were given (not None)."""
    return field_mask_pb2.FieldMask(paths=[name for name, value in fields if value is not None])


def bind(client: object, name: str, method: M, build: Callable[..., Any], returns: str) -> M:
    """Makes `method` the client's method `name`: it gets the name, docstring and parameters
    of its builder, with the return annotation `returns` ("{}" stands for the builder's
    result type: `Agent` for a builder returning `Call[Agent]`), so that help() and IDEs
    show what it does; and it is kept on the client, so that it is made once."""
    functools.update_wrapper(method, build)
    signature = inspect.signature(build)
    built = signature.return_annotation
    inner = built[built.index("[") + 1 : -1] if isinstance(built, str) and "[" in built else "Any"
    annotation = returns.format(inner)
    setattr(method, "__signature__", signature.replace(return_annotation=annotation))  # noqa: B010
    method.__annotations__ = {**build.__annotations__, "return": annotation}
    vars(client)[name] = method
    return method
