"""Sending calls over asyncio gRPC channels, and the descriptors that turn the builders of
`agent_calls` and friends into methods of `cairn.AsyncClient`. The logic is that of
`sync_transport`: the same calls, the same retries (`cairn.retries.Attempts`), the same
errors."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Coroutine, Mapping
from typing import Any, Generic, ParamSpec, Protocol, Self, TypeVar, overload

import grpc
from grpc import aio

from cairn.calls import Call, Paged, Service, Streamed, bind
from cairn.errors import from_rpc_error
from cairn.retries import Attempts, RetryPolicy
from cairn.sync_transport import auth_metadata
from cairn.v1 import recall_pb2_grpc, state_pb2_grpc

__all__ = ["AsyncTransport", "paged", "streaming", "unary"]

P = ParamSpec("P")
T = TypeVar("T")

_STUBS: dict[Service, Callable[[aio.Channel], Any]] = {
    "state": state_pb2_grpc.StateServiceStub,
    "recall": recall_pb2_grpc.RecallServiceStub,
}


class AsyncTransport:
    """Sends calls on asyncio channels, as `SyncTransport` does on synchronous ones."""

    def __init__(
        self,
        channels: Mapping[Service, aio.Channel],
        *,
        api_key: str | None,
        timeout: float | None,
        retry: RetryPolicy,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
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

    async def run(self, call: Call[T]) -> T:
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
                reply = await method(call.request, metadata=self._metadata, timeout=timeout)
            except grpc.RpcError as error:
                await self._sleep(attempts.failed(error))
                continue
            return call.parse(reply)

    async def pages(self, paged: Paged[T]) -> AsyncIterator[T]:
        """The items of every page, fetching the next page when one is used up."""
        token = ""
        while True:
            page = await self.run(paged.page(token))
            for item in page.items:
                yield item
            token = page.next_page_token
            if not token:
                return

    async def stream(self, streamed: Streamed[T]) -> AsyncGenerator[T, None]:
        """The messages of a server stream; closing the iterator cancels the call (use
        `contextlib.aclosing` to close it as soon as you stop iterating)."""
        method = self._method(streamed.service, streamed.method)
        responses = method(streamed.request, metadata=self._metadata, timeout=streamed.timeout)
        try:
            async for response in responses:
                yield streamed.parse(response)
        except grpc.RpcError as error:
            raise from_rpc_error(error) from None
        finally:
            responses.cancel()


class _HasTransport(Protocol):
    @property
    def _transport(self) -> AsyncTransport: ...


class unary(Generic[P, T]):  # noqa: N801 (used like a decorator)
    """A client coroutine method that sends the call its builder makes."""

    def __init__(self, build: Callable[P, Call[T]]) -> None:
        self._build = build

    def __set_name__(self, owner: type[Any], name: str) -> None:
        self._name = name

    @overload
    def __get__(self, client: None, owner: type[Any]) -> Self: ...
    @overload
    def __get__(
        self, client: _HasTransport, owner: type[Any]
    ) -> Callable[P, Coroutine[Any, Any, T]]: ...
    def __get__(
        self, client: _HasTransport | None, owner: type[Any]
    ) -> Self | Callable[P, Coroutine[Any, Any, T]]:
        if client is None:
            return self
        build, transport = self._build, client._transport

        async def method(*args: P.args, **kwargs: P.kwargs) -> T:
            return await transport.run(build(*args, **kwargs))

        return bind(client, self._name, method, build, "{}")


class paged(Generic[P, T]):  # noqa: N801 (used like a decorator)
    """A client method that iterates asynchronously over every item of a list."""

    def __init__(self, build: Callable[P, Paged[T]]) -> None:
        self._build = build

    def __set_name__(self, owner: type[Any], name: str) -> None:
        self._name = name

    @overload
    def __get__(self, client: None, owner: type[Any]) -> Self: ...
    @overload
    def __get__(self, client: _HasTransport, owner: type[Any]) -> Callable[P, AsyncIterator[T]]: ...
    def __get__(
        self, client: _HasTransport | None, owner: type[Any]
    ) -> Self | Callable[P, AsyncIterator[T]]:
        if client is None:
            return self
        build, transport = self._build, client._transport

        def method(*args: P.args, **kwargs: P.kwargs) -> AsyncIterator[T]:
            return transport.pages(build(*args, **kwargs))

        return bind(client, self._name, method, build, "AsyncIterator[{}]")


class streaming(Generic[P, T]):  # noqa: N801 (used like a decorator)
    """A client method that iterates asynchronously over a server stream."""

    def __init__(self, build: Callable[P, Streamed[T]]) -> None:
        self._build = build

    def __set_name__(self, owner: type[Any], name: str) -> None:
        self._name = name

    @overload
    def __get__(self, client: None, owner: type[Any]) -> Self: ...
    @overload
    def __get__(
        self, client: _HasTransport, owner: type[Any]
    ) -> Callable[P, AsyncGenerator[T, None]]: ...
    def __get__(
        self, client: _HasTransport | None, owner: type[Any]
    ) -> Self | Callable[P, AsyncGenerator[T, None]]:
        if client is None:
            return self
        build, transport = self._build, client._transport

        def method(*args: P.args, **kwargs: P.kwargs) -> AsyncGenerator[T, None]:
            return transport.stream(build(*args, **kwargs))

        return bind(client, self._name, method, build, "AsyncGenerator[{}, None]")
