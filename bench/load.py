"""Closed-loop load from one asyncio client, and latency percentiles."""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Awaitable, Callable, Mapping


async def rps(call: Callable[[], Awaitable[object]], duration: float, concurrency: int) -> float:
    """Calls per second that `concurrency` workers sustain for `duration` seconds."""
    loop = asyncio.get_running_loop()
    stop = loop.time() + duration
    count = 0

    async def worker() -> None:
        nonlocal count
        while loop.time() < stop:
            await call()
            count += 1

    start = loop.time()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return count / (loop.time() - start)


async def interleaved(
    calls: Mapping[str, Callable[[], Awaitable[object]]],
    duration: float,
    concurrency: int,
    rounds: int,
) -> dict[str, float]:
    """Median RPS of each call over `rounds` interleaved rounds, so drift hits all alike."""
    samples: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(rounds):
        for name, call in calls.items():
            samples[name].append(await rps(call, duration, concurrency))
    return {name: statistics.median(values) for name, values in samples.items()}


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0-100) by nearest rank."""
    ordered = sorted(values)
    index = max(0, min(len(ordered) - 1, round(q / 100 * len(ordered) + 0.5) - 1))
    return ordered[index]


async def latencies_ms(call: Callable[[], Awaitable[object]], n: int) -> list[float]:
    """Sequential round-trip times in milliseconds."""
    result = []
    for _ in range(n):
        start = time.perf_counter()
        await call()
        result.append((time.perf_counter() - start) * 1000)
    return result
