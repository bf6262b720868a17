"""The in-process event hub behind WatchAgent.

Stores publish events after their transaction commits (from any thread); each watcher
gets its own bounded queue. A watcher that falls more than `QUEUE_SIZE` events behind is
closed rather than allowed to grow without bound.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from state_service.models import AgentEvent

QUEUE_SIZE = 10_000


class Subscription:
    """One watcher's queue of events for one agent."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[AgentEvent] = asyncio.Queue(QUEUE_SIZE)
        self.overflowed = False

    def offer(self, event: AgentEvent) -> None:
        """Queues an event, or marks the watcher as fallen behind."""
        try:
            self.queue.put_nowait(event)
        except asyncio.QueueFull:
            self.overflowed = True


class EventHub:
    """Routes committed events to the watchers of each agent."""

    def __init__(self) -> None:
        self._subscribers: dict[tuple[str, str], set[Subscription]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lock = threading.Lock()

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        """The loop the watchers live on."""
        self._loop = loop

    def publish(self, events: Sequence[AgentEvent]) -> None:
        """Delivers events to watchers; safe to call from any thread."""
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            self._dispatch(list(events))
        else:
            loop.call_soon_threadsafe(self._dispatch, list(events))

    def _dispatch(self, events: list[AgentEvent]) -> None:
        with self._lock:
            for event in events:
                for sub in self._subscribers.get((event.tenant, event.agent_id), ()):
                    sub.offer(event)

    @contextmanager
    def subscribe(self, tenant: str, agent_id: str) -> Iterator[Subscription]:
        """A subscription for the duration of a watch."""
        sub = Subscription()
        key = (tenant, agent_id)
        with self._lock:
            self._subscribers.setdefault(key, set()).add(sub)
        try:
            yield sub
        finally:
            with self._lock:
                subs = self._subscribers.get(key)
                if subs is not None:
                    subs.discard(sub)
                    if not subs:
                        del self._subscribers[key]

    def watcher_count(self) -> int:
        """How many watches are open (for tests and metrics)."""
        with self._lock:
            return sum(len(subs) for subs in self._subscribers.values())
