"""Where blocking store work runs relative to the event loop.

Embedded SQLite reads take tens of microseconds, less than a hop to a thread, so they run
on the loop. Writes wait on fsync and the write lock, so they run on one writer thread
(SQLite has one writer anyway). A networked store runs everything on a thread pool.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
T = TypeVar("T")


class Runner:
    """Runs sync store-bound functions for async servicers."""

    def __init__(self, *, inline_reads: bool, write_threads: int = 1, read_threads: int = 8):
        self._inline_reads = inline_reads
        self._writes = ThreadPoolExecutor(write_threads, thread_name_prefix="cairn-write")
        self._reads = (
            None
            if inline_reads
            else ThreadPoolExecutor(read_threads, thread_name_prefix="cairn-read")
        )

    async def read(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """Runs a read-only function."""
        if self._reads is None:
            return fn(*args, **kwargs)
        return await asyncio.get_running_loop().run_in_executor(
            self._reads, partial(fn, *args, **kwargs)
        )

    async def write(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """Runs a function that may write."""
        return await asyncio.get_running_loop().run_in_executor(
            self._writes, partial(fn, *args, **kwargs)
        )

    def close(self) -> None:
        """Waits for queued work and stops the threads."""
        self._writes.shutdown(wait=True)
        if self._reads is not None:
            self._reads.shutdown(wait=True)
