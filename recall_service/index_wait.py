"""Waiting, without blocking the event loop, until the indexes have applied given seqs.

The indexer calls `Progress.fire` after every batch it applies; each waiting search holds
an `asyncio.Event` that `fire` sets from the indexer thread, then checks its streams again.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable, Mapping

from cairn_server.errors import Unavailable
from recall_service.models import Stream


class Progress:
    """Wakes the asyncio waiters registered with it (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiters: set[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = set()

    def subscribe(self) -> asyncio.Event:
        """An event, set whenever the indexer makes progress."""
        event = asyncio.Event()
        with self._lock:
            self._waiters.add((asyncio.get_running_loop(), event))
        return event

    def unsubscribe(self, event: asyncio.Event) -> None:
        """Stops waking `event`."""
        with self._lock:
            self._waiters = {w for w in self._waiters if w[1] is not event}

    def fire(self) -> None:
        """Sets every registered event (called from any thread)."""
        with self._lock:
            waiters = list(self._waiters)
        for loop, event in waiters:
            loop.call_soon_threadsafe(event.set)


def behind(applied: Callable[[str, str], int], wanted: Mapping[Stream, int]) -> list[Stream]:
    """The streams whose indexes have not reached the seq wanted."""
    return [s for s, seq in wanted.items() if applied(s.tenant, s.id) < seq]


async def until_indexed(
    applied: Callable[[str, str], int],
    progress: Progress,
    wanted: Mapping[Stream, int],
    timeout: float,
) -> None:
    """Returns once every stream is indexed through its wanted seq; raises `Unavailable`
    naming the first stream still behind when `timeout` seconds pass first."""
    if not behind(applied, wanted):
        return
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max(0.0, timeout)
    event = progress.subscribe()
    try:
        while True:
            event.clear()
            late = behind(applied, wanted)
            if not late:
                return
            remaining = deadline - loop.time()
            if remaining <= 0:
                stream = late[0]
                raise Unavailable(
                    f"the search indexes of stream '{stream.id}' have reached seq "
                    f"{applied(stream.tenant, stream.id)}, not min_seq {wanted[stream]}, "
                    f"after waiting {timeout:.1f} s; retry"
                )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(event.wait(), remaining)
    finally:
        progress.unsubscribe(event)
