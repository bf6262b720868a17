"""A background thread lowers its own CPU priority, and only its own."""

from __future__ import annotations

import os
import sys
import threading

import pytest

from cairn_server import thread_priority

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="threads have nice values on Linux")


def in_thread(by: int) -> tuple[int | None, int]:
    """What `lower_current_thread(by)` returns in a new thread, and that thread's nice value
    read back by its id."""
    seen: list[tuple[int | None, int]] = []

    def body() -> None:
        now = thread_priority.lower_current_thread(by)
        seen.append((now, os.getpriority(os.PRIO_PROCESS, threading.get_native_id())))

    thread = threading.Thread(target=body)
    thread.start()
    thread.join()
    return seen[0]


def test_the_calling_thread_is_lowered_by_the_amount_and_the_process_is_not() -> None:
    base = os.getpriority(os.PRIO_PROCESS, 0)
    if base > thread_priority.NICEST - 10:
        pytest.skip("this process already runs at a nice value above 9")
    assert in_thread(10) == (base + 10, base + 10)
    assert os.getpriority(os.PRIO_PROCESS, 0) == base
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == base


def test_the_value_stops_at_19() -> None:
    assert in_thread(100) == (19, 19)


def test_zero_changes_nothing() -> None:
    base = os.getpriority(os.PRIO_PROCESS, 0)
    assert in_thread(0) == (None, base)


def test_a_refused_change_is_logged_and_the_thread_runs_on(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def refuse(which: int, who: int, value: int) -> None:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "setpriority", refuse)
    base = os.getpriority(os.PRIO_PROCESS, 0)
    assert in_thread(10) == (None, base)
    assert [r.getMessage() for r in caplog.records] == [
        "could not lower a background thread's priority; it runs at the process's"
    ]
