"""What a helper process of the recall server does first: tie its life to its parent's and
take the socket it talks over (the Edge worker, the search process)."""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from multiprocessing.connection import Connection


def die_with_parent(parent: int) -> None:
    """Linux: SIGKILL this process when the thread that started it ends (so a parent
    starts its children from threads that live as long as it does)."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
    if os.getppid() != parent:  # the parent died before the line above
        os._exit(1)


def become_child(parent: int, fd: int) -> Connection:
    """Dies with `parent`, leaves SIGINT and SIGTERM to it (the parent decides when this
    process ends: a Ctrl-C reaches the whole process group), and returns the socket `fd`."""
    die_with_parent(parent)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    return Connection(fd)
