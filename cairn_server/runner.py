"""Where blocking store work runs relative to the event loop.

Embedded SQLite reads take tens of microseconds, less than a hop to a thread, so they run
on the loop. Writes wait on fsync, so they run on one writer thread (SQLite has one writer
anyway); with a `batch` (group commit), the writer runs every write queued meanwhile in one
transaction and answers them all after its single commit. A networked store runs
everything on thread pools.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import queue
import random
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager
from dataclasses import dataclass
from functools import partial
from typing import Any, ParamSpec, TypeVar

from cairn_server import tracing

P = ParamSpec("P")
T = TypeVar("T")
MAX_BATCH = 64

log = logging.getLogger("cairn.runner")


@dataclass
class _Job:
    fn: Callable[[], Any]
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[Any]


def _traced(kind: str, fn: Callable[..., T], args: Any, kwargs: Any) -> Callable[[], T]:
    """`fn(*args, **kwargs)` in a span named after it, in the caller's context (so the span
    is a child of the RPC's, whichever thread runs it)."""
    if not tracing.enabled():
        return partial(fn, *args, **kwargs)
    context = contextvars.copy_context()

    def call() -> T:
        with tracing.span(kind, function=getattr(fn, "__qualname__", str(fn))):
            return fn(*args, **kwargs)

    return partial(context.run, call)


def resolve_all(answers: list[tuple[asyncio.Future[Any], bool, Any]]) -> None:
    """Resolves each future with its value (ok) or its exception, skipping cancelled ones;
    runs on the futures' event loop (`call_soon_threadsafe`), once for a whole batch."""
    for future, ok, value in answers:
        if future.cancelled():
            continue
        if ok:
            future.set_result(value)
        else:
            future.set_exception(value)


class Runner:
    """Runs sync store-bound functions for async servicers."""

    def __init__(
        self,
        *,
        inline_reads: bool,
        batch: Callable[[], AbstractContextManager[Any]] | None = None,
        write_threads: int = 1,
        read_threads: int = 8,
        retry_on: tuple[type[BaseException], ...] = (),
        attempts: int = 5,
    ) -> None:
        self._inline_reads = inline_reads
        self._batch = batch
        self._retry_on = retry_on
        self._attempts = attempts
        self._reads = (
            None
            if inline_reads
            else ThreadPoolExecutor(read_threads, thread_name_prefix="cairn-read")
        )
        self._writes: ThreadPoolExecutor | None = None
        self._queue: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._writer: threading.Thread | None = None
        if batch is None:
            self._writes = ThreadPoolExecutor(write_threads, thread_name_prefix="cairn-write")
        else:
            self._writer = threading.Thread(target=self._write_loop, name="cairn-writer")
            self._writer.start()

    async def read(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """Runs a read-only function."""
        call = _traced("store.read", fn, args, kwargs)
        if self._reads is None:
            return call()
        return await asyncio.get_running_loop().run_in_executor(self._reads, call)

    async def write(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """Runs a function that may write; answers once its writes are committed."""
        loop = asyncio.get_running_loop()
        call = _traced("store.write", fn, args, kwargs)
        if self._writes is not None:
            return await loop.run_in_executor(self._writes, partial(self._retrying, call))
        future: asyncio.Future[T] = loop.create_future()
        self._queue.put(_Job(call, loop, future))
        return await future

    def _retrying(self, call: Callable[[], T]) -> T:
        """Runs a unit of work again when the database aborted it for a conflict (a
        deadlock or serialization failure): it wrote nothing, so it can simply rerun."""
        for attempt in range(1, self._attempts + 1):
            try:
                return call()
            except self._retry_on:
                if attempt == self._attempts:
                    raise
                time.sleep(0.005 * attempt * (1 + random.random()))
        raise AssertionError("unreachable")

    def _write_loop(self) -> None:
        assert self._batch is not None
        while True:
            job = self._queue.get()
            if job is None:
                return
            jobs = [job]
            while len(jobs) < MAX_BATCH:
                try:
                    more = self._queue.get_nowait()
                except queue.Empty:
                    break
                if more is None:
                    self._queue.put(None)
                    break
                jobs.append(more)
            results: list[tuple[bool, Any]] = []
            try:
                with self._batch():
                    for each in jobs:
                        try:
                            results.append((True, each.fn()))
                        except Exception as error:
                            results.append((False, error))
            except Exception as error:
                log.exception("group commit failed", extra={"jobs": len(jobs)})
                results = [(False, error)] * len(jobs)
            # One wake-up per event loop for the whole group, not one per job: each is a
            # write to the loop's self-pipe, and the loop's read and callback after it.
            by_loop: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Future[Any], bool, Any]]]
            by_loop = {}
            for each, (ok, value) in zip(jobs, results, strict=True):
                by_loop.setdefault(each.loop, []).append((each.future, ok, value))
            for loop, answers in by_loop.items():
                loop.call_soon_threadsafe(resolve_all, answers)

    def close(self) -> None:
        """Finishes queued work and stops the threads."""
        if self._writer is not None:
            self._queue.put(None)
            self._writer.join()
        if self._writes is not None:
            self._writes.shutdown(wait=True)
        if self._reads is not None:
            self._reads.shutdown(wait=True)
