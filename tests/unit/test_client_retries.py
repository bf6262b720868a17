"""cairn.retries: which failures are retried, how long the client waits, and the deadline."""

from __future__ import annotations

from typing import Any

import grpc
import pytest

from cairn.errors import Unavailable
from cairn.retries import Attempts, RetryPolicy


class FakeRpcError(grpc.RpcError):
    """A failed call as grpc raises it: code(), details(), trailing_metadata()."""

    def __init__(self, code: grpc.StatusCode, details: str = "down") -> None:
        self._code, self._details = code, details

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details

    def trailing_metadata(self) -> Any:
        return ()


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_backoff_caps_grow_exponentially_up_to_the_maximum() -> None:
    policy = RetryPolicy(initial_backoff=0.1, max_backoff=1.0, multiplier=3.0)
    assert [round(policy.backoff_cap(n), 6) for n in range(1, 6)] == [0.1, 0.3, 0.9, 1.0, 1.0]


def test_backoff_is_a_uniform_share_of_the_cap() -> None:
    policy = RetryPolicy(initial_backoff=0.5, max_backoff=10.0, multiplier=2.0)
    assert policy.backoff(3, draw=lambda: 0.25) == 0.5
    assert policy.backoff(3, draw=lambda: 0.0) == 0.0
    assert policy.backoff(1, draw=lambda: 0.999) == pytest.approx(0.4995)


def test_an_idempotent_call_is_retried_on_unavailable() -> None:
    policy = RetryPolicy(initial_backoff=0.2, multiplier=2.0, max_attempts=4)
    waits = [
        policy.next_wait(
            idempotent=True,
            code=grpc.StatusCode.UNAVAILABLE,
            attempts=n,
            remaining=None,
            draw=lambda: 0.5,
        )
        for n in (1, 2, 3, 4)
    ]
    assert waits == [0.1, 0.2, 0.4, None]


@pytest.mark.parametrize(
    ("idempotent", "code"),
    [
        (False, grpc.StatusCode.UNAVAILABLE),
        (True, grpc.StatusCode.NOT_FOUND),
        (True, grpc.StatusCode.ABORTED),
        (True, grpc.StatusCode.DEADLINE_EXCEEDED),
        (True, grpc.StatusCode.INVALID_ARGUMENT),
        (True, grpc.StatusCode.INTERNAL),
    ],
)
def test_calls_that_are_not_idempotent_and_codes_that_are_answers_are_not_retried(
    idempotent: bool, code: grpc.StatusCode
) -> None:
    wait = RetryPolicy().next_wait(idempotent=idempotent, code=code, attempts=1, remaining=None)
    assert wait is None


def test_no_retry_when_the_wait_would_outlast_the_deadline() -> None:
    policy = RetryPolicy(initial_backoff=1.0)
    code = grpc.StatusCode.UNAVAILABLE
    draw = lambda: 0.5  # noqa: E731
    assert policy.next_wait(idempotent=True, code=code, attempts=1, remaining=0.6, draw=draw) == 0.5
    assert (
        policy.next_wait(idempotent=True, code=code, attempts=1, remaining=0.5, draw=draw) is None
    )


def test_other_codes_are_retried_when_the_policy_names_them() -> None:
    policy = RetryPolicy(
        retryable_codes=frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.ABORTED})
    )
    wait = policy.next_wait(
        idempotent=True, code=grpc.StatusCode.ABORTED, attempts=1, remaining=None, draw=lambda: 1
    )
    assert wait == 0.1


def test_never_sends_each_call_once() -> None:
    wait = RetryPolicy.never().next_wait(
        idempotent=True, code=grpc.StatusCode.UNAVAILABLE, attempts=1, remaining=None
    )
    assert wait is None


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_attempts": 0}, "max_attempts must be at least 1, got 0"),
        ({"initial_backoff": -1.0}, "initial_backoff and max_backoff must not be negative"),
        ({"multiplier": 0.5}, "multiplier must be at least 1, got 0.5"),
    ],
)
def test_a_policy_that_makes_no_sense_is_refused(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError) as caught:
        RetryPolicy(**kwargs)
    assert str(caught.value) == message


def test_attempts_give_each_try_what_is_left_of_the_deadline() -> None:
    clock = Clock()
    attempts = Attempts(
        RetryPolicy(initial_backoff=0.5), idempotent=True, timeout=2.0, clock=clock, draw=lambda: 1
    )
    assert attempts.timeout() == 2.0
    clock.now += 0.75
    assert attempts.failed(FakeRpcError(grpc.StatusCode.UNAVAILABLE)) == 0.5
    clock.now += 0.5
    assert attempts.timeout() == 0.75
    assert attempts.count == 2


def test_attempts_raise_the_typed_error_with_the_attempt_count() -> None:
    attempts = Attempts(RetryPolicy(max_attempts=2), idempotent=True, timeout=None, draw=lambda: 0)
    attempts.timeout()
    assert attempts.failed(FakeRpcError(grpc.StatusCode.UNAVAILABLE)) == 0.0
    attempts.timeout()
    with pytest.raises(Unavailable) as caught:
        attempts.failed(FakeRpcError(grpc.StatusCode.UNAVAILABLE, "connection refused"))
    assert (caught.value.attempts, caught.value.details) == (2, "connection refused")
    assert caught.value.__suppress_context__


def test_attempts_without_a_deadline_send_no_timeout() -> None:
    attempts = Attempts(RetryPolicy(), idempotent=False, timeout=None)
    assert attempts.timeout() is None


def test_a_spent_deadline_gives_a_zero_timeout_not_a_negative_one() -> None:
    clock = Clock()
    attempts = Attempts(RetryPolicy(), idempotent=True, timeout=1.0, clock=clock)
    clock.now += 5
    assert attempts.timeout() == 0.0
