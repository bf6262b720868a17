"""The event loop a server runs on: uvloop where it is installed, else asyncio's own.

gRPC's asyncio server spends much of each call in the loop's own bookkeeping (scheduling
callbacks, waking on the completion queue's socket); uvloop does that in C. On the recall
server at 100k records (docs/benchmarks.md, runs P and Q) it answered more calls per second
and its searches took 35 to 65% of the time at p50. `--event-loop asyncio` (env CAIRN_EVENT_LOOP)
keeps the standard loop, for comparison or where uvloop is not installed (it has no Windows
build).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, Literal, TypeVar, get_args

T = TypeVar("T")
EventLoop = Literal["uvloop", "asyncio"]
CHOICES: tuple[str, ...] = get_args(EventLoop)


def loop_factory(choice: EventLoop) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """What makes the loop: uvloop's when asked for and installed; None for asyncio's."""
    if choice == "asyncio":
        return None
    try:
        import uvloop
    except ImportError:  # no build for this platform: the standard loop serves
        return None
    return uvloop.new_event_loop


def run(main: Coroutine[Any, Any, T], choice: EventLoop = "uvloop") -> T:
    """Runs `main` to completion on a new loop of the chosen kind (`asyncio.run` otherwise)."""
    with asyncio.Runner(loop_factory=loop_factory(choice)) as runner:
        return runner.run(main)
