"""Group commit: many concurrent writes share one transaction and one fsync.

Every write RPC hands its unit of work to `GroupCommitter.write`. The writer thread takes
whatever has queued up since it last looked, runs the units one after another inside one
`store.group()` (each in its own savepoint, so one that fails rolls back alone), commits
once, and only then answers each caller. Under load the cost of an fsync is shared by every
write waiting for it; a lone write pays it alone, as before. Nothing is acknowledged before
the commit that makes it durable.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any, ParamSpec, TypeVar

from cairn_server.runner import Runner
from recall_service.store.base import LogStore

P = ParamSpec("P")
T = TypeVar("T")

MAX_GROUP = 256


@dataclass(slots=True)
class _Unit:
    work: Callable[[], Any]
    future: asyncio.Future[Any]
    loop: asyncio.AbstractEventLoop


def _settle(future: asyncio.Future[Any], ok: bool, value: Any) -> None:
    if future.cancelled():
        return
    if ok:
        future.set_result(value)
    else:
        future.set_exception(value)


class GroupCommitter:
    """Runs units of work on the runner's writer thread, committing them in groups."""

    def __init__(self, store: LogStore, runner: Runner, max_group: int = MAX_GROUP) -> None:
        self._store = store
        self._runner = runner
        self._max_group = max_group
        self._pending: list[_Unit] = []
        self._lock = threading.Lock()
        self._draining = False

    async def write(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """Runs `fn` in the next group; returns once the group has committed."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        with self._lock:
            self._pending.append(_Unit(partial(fn, *args, **kwargs), future, loop))
            start = not self._draining
            self._draining = True
        if start:
            drain = asyncio.ensure_future(self._runner.write(self._drain))
            drain.add_done_callback(lambda done: done.exception())
        return await future

    def _drain(self) -> None:
        """On the writer thread: commit groups until nothing is pending."""
        while True:
            with self._lock:
                units = self._pending[: self._max_group]
                del self._pending[: self._max_group]
                if not units:
                    self._draining = False
                    return
            self._commit(units)

    def _commit(self, units: list[_Unit]) -> None:
        outcomes: list[tuple[bool, Any]] = []
        try:
            with self._store.group():
                for unit in units:
                    try:
                        outcomes.append((True, unit.work()))
                    except Exception as error:  # the unit rolled back to its savepoint
                        outcomes.append((False, error))
        except Exception as error:  # the commit failed: nothing in the group is durable
            outcomes = [(False, error)] * len(units)
        for unit, (ok, value) in zip(units, outcomes, strict=True):
            unit.loop.call_soon_threadsafe(_settle, unit.future, ok, value)
