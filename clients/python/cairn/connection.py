"""Calling Cairn's generated stubs with an API key and a deadline on every call."""

from __future__ import annotations

from typing import Any


class Authenticated:
    """Wraps a generated stub: every call carries `authorization: Bearer <key>` and a
    deadline, unless the caller passes its own `metadata` or `timeout`."""

    def __init__(self, stub: Any, api_key: str | None, timeout: float = 30.0) -> None:
        self._stub = stub
        self._metadata = (("authorization", f"Bearer {api_key}"),) if api_key else ()
        self._timeout = timeout

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._stub, name)

        def call(request: Any, **kwargs: Any) -> Any:
            kwargs.setdefault("metadata", self._metadata)
            kwargs.setdefault("timeout", self._timeout)
            return method(request, **kwargs)

        return call
