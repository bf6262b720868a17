"""Raw gRPC stubs that send an API key with every call."""

from __future__ import annotations

from typing import Any

import grpc

from cairn.connection import Authenticated
from cairn.v1 import state_pb2, state_pb2_grpc

# Tests call stubs the way the client package does.
Keyed = Authenticated


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


def recall_client(channel: grpc.Channel, key: str | None) -> Any:
    """A RecallService stub bound to a key."""
    from cairn.v1 import recall_pb2_grpc

    return Keyed(recall_pb2_grpc.RecallServiceStub(channel), key)
