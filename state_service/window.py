"""The in-context window as CompileContext returns it, cached per agent and window version.

Committed messages never change, so a window is fully identified by (agent, context
version): a cached window is valid exactly while the stored context version matches, on
any replica.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass

from state_service.models import Message
from state_service.store.base import StateReader
from state_service.tokens import TokenCounter, message_tokens


@dataclass(frozen=True, slots=True)
class Window:
    """The messages after the system message, and their tokens."""

    context_version: int
    messages: tuple[Message, ...]
    tokens: int


def count_message(counter: TokenCounter, message: Message) -> int:
    """Tokens of one message in a chat request."""
    return message_tokens(
        counter,
        message.content,
        message.name,
        [(call.name, call.arguments_json) for call in message.tool_calls],
    )


class WindowCache:
    """Recently compiled windows, bounded by their total number of messages."""

    def __init__(self, max_messages: int = 200_000) -> None:
        self._windows: OrderedDict[str, Window] = OrderedDict()
        self._size = 0
        self._max = max_messages
        self._lock = threading.Lock()

    def load(
        self,
        reader: StateReader,
        tenant: str,
        agent_id: str,
        context_version: int,
        counter: TokenCounter,
    ) -> Window:
        """The window at `context_version`, from the cache or the store."""
        with self._lock:
            cached = self._windows.get(agent_id)
            if cached is not None and cached.context_version == context_version:
                self._windows.move_to_end(agent_id)
                return cached
        stored = reader.window(tenant, agent_id, counter.name)
        # Position 0 is the agent's system message; later system messages (memory updates
        # a harness committed) are part of the conversation.
        messages = tuple(m if m.tokens >= 0 else _recounted(m, counter) for m in stored[1:])
        window = Window(context_version, messages, sum(m.tokens for m in messages))
        self._put(agent_id, window)
        return window

    def _put(self, agent_id: str, window: Window) -> None:
        with self._lock:
            old = self._windows.pop(agent_id, None)
            if old is not None:
                self._size -= len(old.messages)
            self._windows[agent_id] = window
            self._size += len(window.messages)
            while self._size > self._max and len(self._windows) > 1:
                _, evicted = self._windows.popitem(last=False)
                self._size -= len(evicted.messages)


def _recounted(message: Message, counter: TokenCounter) -> Message:
    from dataclasses import replace

    return replace(message, tokens=count_message(counter, message))
