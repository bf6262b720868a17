"""Background work at a lower CPU priority than the RPCs it serves.

On Linux a nice value belongs to each thread, so a thread can give way to the rest of its
process: when the cores are busy, the scheduler runs the threads answering RPCs first, and
the background thread takes what they leave. Threads it starts inherit its value. Elsewhere
a nice value belongs to the whole process, and nothing is changed.
"""

from __future__ import annotations

import logging
import os
import sys
import threading

log = logging.getLogger("cairn.priority")

NICEST = 19


def lower_current_thread(by: int) -> int | None:
    """Raises the calling thread's nice value by `by` (capped at 19; never lowered, so a
    process started under `nice` keeps its own setting as the floor). Returns the thread's
    nice value now, or None where threads have no nice value of their own or the change was
    refused (logged; the thread runs on as it was)."""
    if by <= 0 or sys.platform != "linux":
        return None
    thread = threading.get_native_id()
    try:
        current = os.getpriority(os.PRIO_PROCESS, thread)
        target = min(NICEST, current + by)
        os.setpriority(os.PRIO_PROCESS, thread, target)
    except OSError as error:
        log.warning(
            "could not lower a background thread's priority; it runs at the process's",
            extra={"thread_name": threading.current_thread().name, "error": str(error)},
        )
        return None
    return target
