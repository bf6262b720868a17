"""Sending calls over synchronous gRPC channels, and the descriptors that turn the builders
of `agent_calls` and friends into methods of `cairn.Client`."""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Generator, Iterator, Mapping
from typing import Any, Generic, ParamSpec, Protocol, Self, TypeVar, overload

import grpc

from cairn.calls import Call, Paged, Service, Streamed, bind
from cairn.errors import from_rpc_error
from cairn.retries import Attempts, RetryPolicy
from cairn.v1 import recall_pb2_grpc, state_pb2_grpc

__all__ = ["SyncTransport", "paged", "streaming", "unary"]

P = ParamSpec("P")
T = TypeVar("T")

_STUBS: dict[Service, Callable[[grpc.Channel], Any]] = {
    "state": state_pb2_grpc.StateServiceStub,
    "recall": recall_pb2_grpc.RecallServiceStub,
}


def auth_metadata(api_key: str | None) -> tuple[tuple[str, str], ...]:
    """The `authorization` metadata for an API key (none without one)."""
    return (("authorization", f"Bearer {api_key}"),) if api_key else ()


class SyncTransport:
    """Sends calls: API key on each, the default timeout unless the call sets one, retries
    of idempotent calls per the policy, typed errors."""

    def __init__(
        self,
        channels: Mapping[Service, grpc.Channel],
        *,
        api_key: str | None,
        timeout: float | None,
        retry: RetryPolicy,
        sleep: Callable[[float], None] = time.sleep,
        draw: Callable[[], float] = random.random,
    ) -> None:
        self._stubs = {service: _STUBS[service](channel) for service, channel in channels.items()}
        self._metadata = auth_metadata(api_key)
        self._timeout = timeout
        self._retry = retry
        self._sleep = sleep
        self._draw = draw

    def _method(self, service: Service, method: str) -> Any:
        stub = self._stubs.get(service)
        if stub is None:
            raise RuntimeError(
                f"this client has no {service} address: pass {service}='host:port' to create it"
            )
        return getattr(stub, method)

    def run(self, call: Call[T]) -> T:
        """Sends a unary call and returns its parsed reply."""
        method = self._method(call.service, call.method)
        attempts = Attempts(
            self._retry,
            idempotent=call.idempotent,
            timeout=self._timeout if call.timeout is None else call.timeout,
            draw=self._draw,
        )
        while True:
            timeout = attempts.timeout()
            try:
                reply = method(call.request, metadata=self._metadata, timeout=timeout)
            except grpc.RpcError as error:
                self._sleep(attempts.failed(error))
                continue
            return call.parse(reply)

    def pages(self, paged: Paged[T]) -> Iterator[T]:
        """The items of every page, fetching the next page when one is used up."""
        token = ""
        while True:
            page = self.run(paged.page(token))
            yield from page.items
            token = page.next_page_token
            if not token:
                return

    def stream(self, streamed: Streamed[T]) -> Generator[T, None, None]:
        """The messages of a server stream; closing the generator (or leaving a `for` loop
        and dropping it) cancels the call."""
        method = self._method(streamed.service, streamed.method)
        responses = method(streamed.request, metadata=self._metadata, timeout=streamed.timeout)
        try:
            for response in responses:
                yield streamed.parse(response)
        except grpc.RpcError as error:
            raise from_rpc_error(error) from None
        finally:
            responses.cancel()


class _HasTransport(Protocol):
    @property
    def _transport(self) -> SyncTransport: ...


class unary(Generic[P, T]):  # noqa: N801 (used like a decorator)
    """A client method that sends the call its builder makes and returns the reply."""

    def __init__(self, build: Callable[P, Call[T]]) -> None:
        self._build = build

    def __set_name__(self, owner: type[Any], name: str) -> None:
        self._name = name

    @overload
    def __get__(self, client: None, owner: type[Any]) -> Self: ...
    @overload
    def __get__(self, client: _HasTransport, owner: type[Any]) -> Callable[P, T]: ...
    def __get__(self, client: _HasTransport | None, owner: type[Any]) -> Self | Callable[P, T]:
        if client is None:
            return self
        build, transport = self._build, client._transport

        def method(*args: P.args, **kwargs: P.kwargs) -> T:
            return transport.run(build(*args, **kwargs))

        return bind(client, self._name, method, build, "{}")


class paged(Generic[P, T]):  # noqa: N801 (used like a decorator)
    """A client method that iterates over every item of a list, page after page."""

    def __init__(self, build: Callable[P, Paged[T]]) -> None:
        self._build = build

    def __set_name__(self, owner: type[Any], name: str) -> None:
        self._name = name

    @overload
    def __get__(self, client: None, owner: type[Any]) -> Self: ...
    @overload
    def __get__(self, client: _HasTransport, owner: type[Any]) -> Callable[P, Iterator[T]]: ...
    def __get__(
        self, client: _HasTransport | None, owner: type[Any]
    ) -> Self | Callable[P, Iterator[T]]:
        if client is None:
            return self
        build, transport = self._build, client._transport

        def method(*args: P.args, **kwargs: P.kwargs) -> Iterator[T]:
            return transport.pages(build(*args, **kwargs))

        return bind(client, self._name, method, build, "Iterator[{}]")


class streaming(Generic[P, T]):  # noqa: N801 (used like a decorator)
    """A client method that iterates over a server stream."""

    def __init__(self, build: Callable[P, Streamed[T]]) -> None:
        self._build = build

    def __set_name__(self, owner: type[Any], name: str) -> None:
        self._name = name

    @overload
    def __get__(self, client: None, owner: type[Any]) -> Self: ...
    @overload
    def __get__(
        self, client: _HasTransport, owner: type[Any]
    ) -> Callable[P, Generator[T, None, None]]: ...
    def __get__(
        self, client: _HasTransport | None, owner: type[Any]
    ) -> Self | Callable[P, Generator[T, None, None]]:
        if client is None:
            return self
        build, transport = self._build, client._transport

        def method(*args: P.args, **kwargs: P.kwargs) -> Generator[T, None, None]:
            return transport.stream(build(*args, **kwargs))

        return bind(client, self._name, method, build, "Generator[{}, None, None]")
