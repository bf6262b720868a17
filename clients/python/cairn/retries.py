"""When to send a failed call again, and how long to wait first.

Only calls that are safe to repeat are retried: reads, and writes that carry a key the server
deduplicates on (`CommitStep`'s step id, a recall write's idempotency key). A retried call
keeps its deadline: the timeout covers every attempt and the waits between them, so a call
never takes longer than asked because it was retried.

Waits grow exponentially with "full jitter" (a uniform draw between 0 and the capped
exponential), which spreads the retries of many clients after an outage, as gRPC's own
retry policy does (gRFC A6).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass

import grpc

from cairn.errors import from_rpc_error

__all__ = ["DEFAULT_RETRYABLE_CODES", "Attempts", "RetryPolicy"]

# UNAVAILABLE is the code for "the call did not happen or may not have completed because the
# server is unreachable or restarting": always worth another try for a repeatable call.
# Other codes are answers (NOT_FOUND, ABORTED, ...) or exhaust the deadline (DEADLINE_EXCEEDED).
DEFAULT_RETRYABLE_CODES: frozenset[grpc.StatusCode] = frozenset({grpc.StatusCode.UNAVAILABLE})


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How idempotent calls are retried. `max_attempts` counts the first call (1 turns retries
    off); the wait before retry n (n = 1, 2, ...) is uniform in
    [0, min(max_backoff, initial_backoff * multiplier ** (n - 1))] seconds."""

    max_attempts: int = 4
    initial_backoff: float = 0.1
    max_backoff: float = 2.0
    multiplier: float = 2.0
    retryable_codes: frozenset[grpc.StatusCode] = DEFAULT_RETRYABLE_CODES

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError(f"max_attempts must be at least 1, got {self.max_attempts}")
        if self.initial_backoff < 0 or self.max_backoff < 0:
            raise ValueError("initial_backoff and max_backoff must not be negative")
        if self.multiplier < 1:
            raise ValueError(f"multiplier must be at least 1, got {self.multiplier}")

    @classmethod
    def never(cls) -> RetryPolicy:
        """A policy that sends every call once."""
        return cls(max_attempts=1)

    def backoff_cap(self, retry: int) -> float:
        """The longest wait before retry `retry` (1 for the first retry)."""
        return float(min(self.max_backoff, self.initial_backoff * self.multiplier ** (retry - 1)))

    def backoff(self, retry: int, draw: Callable[[], float] = random.random) -> float:
        """A jittered wait before retry `retry`; `draw` returns a float in [0, 1)."""
        return self.backoff_cap(retry) * draw()

    def next_wait(
        self,
        *,
        idempotent: bool,
        code: grpc.StatusCode,
        attempts: int,
        remaining: float | None,
        draw: Callable[[], float] = random.random,
    ) -> float | None:
        """The wait before sending the call again after `attempts` attempts failed, the last
        with `code`; None when the call must not be retried (not idempotent, a code that is
        an answer, attempts used up, or less time left than the wait)."""
        if not idempotent or code not in self.retryable_codes or attempts >= self.max_attempts:
            return None
        wait = self.backoff(attempts, draw)
        if remaining is not None and wait >= remaining:
            return None
        return wait


class Attempts:
    """The attempts of one call within its deadline; shared by the sync and async
    transports. Call `timeout()` before each attempt and `failed(error)` after a failed one:
    it returns the wait before the next attempt, or raises the typed error."""

    def __init__(
        self,
        policy: RetryPolicy,
        *,
        idempotent: bool,
        timeout: float | None,
        clock: Callable[[], float] = time.monotonic,
        draw: Callable[[], float] = random.random,
    ) -> None:
        self._policy = policy
        self._idempotent = idempotent
        self._clock = clock
        self._draw = draw
        self._deadline = None if timeout is None else clock() + timeout
        self.count = 0

    def _remaining(self) -> float | None:
        return None if self._deadline is None else self._deadline - self._clock()

    def timeout(self) -> float | None:
        """Counts an attempt and returns its timeout: what is left of the deadline."""
        self.count += 1
        remaining = self._remaining()
        return None if remaining is None else max(remaining, 0.0)

    def failed(self, error: grpc.RpcError) -> float:
        """The wait before the next attempt; raises the typed error when there is none."""
        code_of = getattr(error, "code", None)
        code = code_of() if callable(code_of) else grpc.StatusCode.UNKNOWN
        wait = self._policy.next_wait(
            idempotent=self._idempotent,
            code=code,
            attempts=self.count,
            remaining=self._remaining(),
            draw=self._draw,
        )
        if wait is None:
            raise from_rpc_error(error, attempts=self.count) from None
        return wait
