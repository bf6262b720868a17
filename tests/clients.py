"""Raw gRPC stubs that send an API key with every call."""

from __future__ import annotations

from typing import Any

import grpc

from cairn.v1 import state_pb2, state_pb2_grpc


class Keyed:
    """Wraps a stub so every call carries `authorization: Bearer <key>` and a deadline."""

    def __init__(self, stub: Any, key: str | None, timeout: float = 30.0) -> None:
        self._stub = stub
        self._metadata = [("authorization", f"Bearer {key}")] if key else []
        self._timeout = timeout

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._stub, name)

        def call(request: Any, **kwargs: Any) -> Any:
            kwargs.setdefault("metadata", self._metadata)
            kwargs.setdefault("timeout", self._timeout)
            return method(request, **kwargs)

        return call


def state_client(channel: grpc.Channel, key: str | None) -> Any:
    """A StateService stub bound to a key."""
    return Keyed(state_pb2_grpc.StateServiceStub(channel), key)


def rpc_error(fn: Any, *args: Any, **kwargs: Any) -> grpc.RpcError:
    """Calls fn and returns the RpcError it must raise."""
    try:
        fn(*args, **kwargs)
    except grpc.RpcError as error:
        return error
    raise AssertionError("the call succeeded but should have failed")


def block(label: str, value: str = "", **kw: Any) -> state_pb2.Block:
    """A block spec."""
    return state_pb2.Block(label=label, value=value, **kw)
