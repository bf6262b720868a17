"""The server's side of the search process (`index_process`): searches go there and come back.

`IndexProcess.search` has `SearchEngine.search`'s signature, so the servicer does not know
which it talks to. `notify` (the log grew) is called by the log store after each commit, on
the writer's thread; it never waits for the search process. The indexer's metrics arrive
every quarter second and are set on the server's own (/metrics shows them as before).

When the search process dies, the searches it had not answered fail with UNAVAILABLE and
the next search starts another, which catches up from the indexes' own markers; writes go on
meanwhile. The search process dies with the server (`PR_SET_PDEATHSIG`), and so does its
Edge worker with it.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any

from cairn_server.auth import Principal
from cairn_server.error_transport import decode_error
from cairn_server.errors import CairnError, Unavailable
from cairn_server.metrics import Metrics
from cairn_server.runner import resolve_all
from recall_service.search import Answer
from recall_service.search_query import SearchQuery

if TYPE_CHECKING:
    from recall_service.server import RecallSettings

log = logging.getLogger("cairn.recall.index")

# Opening the projections loads the embedder and may replay Edge's WAL.
START_TIMEOUT_S = 120.0
CLOSE_TIMEOUT_S = 120.0
RESTART_PAUSE_S = 1.0
RESTART_PAUSE_MAX_S = 30.0
Answers = list[tuple[asyncio.Future[Any], bool, Any]]
Labels = tuple[tuple[str, str], ...]
Sample = tuple[str, Labels, float]


def set_samples(
    metrics: Metrics, counted: dict[tuple[str, Labels], float], samples: Sequence[Sample]
) -> None:
    """The search process's metric samples on the server's metrics: gauges set, counters
    moved on by what they grew since the last report (`counted` keeps the last values; empty
    it when a new search process starts counting from zero)."""
    for name, labels, value in samples:
        label = dict(labels)
        if name == "cairn_index_lag_records":
            metrics.index_lag_records.labels(label["projection"]).set(value)
        elif name == "cairn_index_lag_seconds":
            metrics.index_lag_seconds.labels(label["projection"]).set(value)
        elif name == "cairn_vector_points_unoptimized":
            metrics.vector_points_unoptimized.set(value)
        elif name in ("cairn_embedded_texts_total", "cairn_embedding_seconds_total"):
            grown = value - counted.get((name, labels), 0.0)
            counted[(name, labels)] = value
            counter = (
                metrics.embedded_texts
                if name == "cairn_embedded_texts_total"
                else metrics.embedding_seconds
            )
            if grown > 0:
                counter.labels(label["embedder"]).inc(grown)


class IndexProcess:
    """Starts and talks to the search process (see the module)."""

    def __init__(self, settings: RecallSettings, metrics: Metrics | None = None) -> None:
        self._settings = settings
        self._metrics = metrics
        self._lock = threading.Lock()  # the socket's sends, the pending searches, the child
        self._pending: dict[int, tuple[asyncio.AbstractEventLoop, asyncio.Future[Any]]] = {}
        self._ids = itertools.count(1)
        self._counted: dict[tuple[str, Labels], float] = {}
        self._proc: subprocess.Popen[bytes] | None = None
        self._conn: Connection | None = None
        self._receiver: threading.Thread | None = None
        self._closed = False
        self._dead = threading.Event()  # the child died: the keeper starts another
        self._wake_owed = False  # a wake-up `notify` could not send (the lock was taken)
        self._install(*self._spawn())
        # Children are started by threads that live as long as this process: the child's
        # PR_SET_PDEATHSIG fires when the *thread* that started it ends.
        self._keeper = threading.Thread(target=self._keep, name="cairn-index-keeper", daemon=True)
        self._keeper.start()

    # -- the child ------------------------------------------------------------------------

    def _spawn(self) -> tuple[subprocess.Popen[bytes], Connection]:
        """Starts a search process and waits until it is open. Raises `Unavailable` with the
        child's own message when it cannot open."""
        parent, child = socket.socketpair()
        try:
            command = [
                sys.executable,
                "-m",
                "recall_service.index_process",
                "--fd",
                str(child.fileno()),
                "--parent",
                str(os.getpid()),
            ]
            proc = subprocess.Popen(command, pass_fds=(child.fileno(),))
        finally:
            child.close()
        conn = Connection(parent.detach())
        reply: Any = None
        try:
            conn.send(self._settings.model_dump_json())
            if conn.poll(START_TIMEOUT_S):
                reply = conn.recv()
        except (EOFError, OSError):
            reply = None
        if reply != ("ready",):
            conn.close()
            code = _reap(proc)
            if reply is not None and reply[0] == "failed":
                raise Unavailable(reply[1])
            raise Unavailable(f"the search process did not start (exit code {code})")
        return proc, conn

    def _install(self, proc: subprocess.Popen[bytes], conn: Connection) -> None:
        """Makes a started child the one searches go to, and listens to it."""
        with self._lock:
            self._proc, self._conn = proc, conn
            self._counted.clear()  # a new child counts its metrics from zero
        self._receiver = threading.Thread(
            target=self._receive, args=(conn,), name="cairn-index-replies", daemon=True
        )
        self._receiver.start()

    def _keep(self) -> None:
        """After a child died: pause, reap it, start another — after a longer pause each time
        that fails (up to `RESTART_PAUSE_MAX_S`). Searches meanwhile fail at once; nothing
        here holds the lock while it waits."""
        pause = RESTART_PAUSE_S
        while True:
            self._dead.wait()
            if self._closed:
                return
            time.sleep(pause)
            self._dead.clear()
            with self._lock:
                if self._closed:
                    return
                old, self._proc = self._proc, None
            code = _reap(old) if old is not None else None
            log.warning("starting another search process", extra={"code": code})
            try:
                self._install(*self._spawn())
            except Exception as error:
                pause = min(2 * pause, RESTART_PAUSE_MAX_S)
                message = error.message if isinstance(error, CairnError) else repr(error)
                extra = {"error": message, "retry_in_s": pause}
                log.error("the search process did not start", extra=extra)
                self._dead.set()
            else:
                pause = RESTART_PAUSE_S

    def _receive(self, conn: Connection) -> None:
        """Resolves the searches the child answers and sets its metrics; when it dies, fails
        the searches it had not answered and wakes the keeper."""
        while True:
            try:
                message = conn.recv()
            except (EOFError, OSError):
                break
            if message[0] == "closed":
                return
            if message[0] == "metrics":
                self._set_metrics(message[1])
                continue
            _, call_id, ok, value = message
            with self._lock:
                waiting = self._pending.pop(call_id, None)
            if waiting is not None:
                loop, future = waiting
                answer = value if ok else decode_error(value)
                loop.call_soon_threadsafe(resolve_all, [(future, ok, answer)])
        with self._lock:
            if self._conn is conn:
                self._conn = None
            lost, self._pending = self._pending, {}
        conn.close()
        if self._closed:
            return
        log.error("the search process exited", extra={"searches_lost": len(lost)})
        error = Unavailable("the search process exited during the search; retry")
        by_loop: dict[asyncio.AbstractEventLoop, Answers] = {}
        for loop, future in lost.values():
            by_loop.setdefault(loop, []).append((future, False, error))
        for loop, answers in by_loop.items():
            loop.call_soon_threadsafe(resolve_all, answers)
        self._dead.set()

    def _set_metrics(self, samples: Sequence[Sample]) -> None:
        if self._metrics is not None:
            set_samples(self._metrics, self._counted, samples)

    # -- what the server calls ------------------------------------------------------------

    async def search(
        self, principal: Principal, query: SearchQuery, time_left: float | None = None
    ) -> Answer:
        """`SearchEngine.search`, in the search process."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Answer] = loop.create_future()
        with self._lock:
            if self._closed:
                raise Unavailable("the recall service is shutting down")
            if self._conn is None:
                raise Unavailable("the search process is starting again after it exited; retry")
            call_id = next(self._ids)
            self._pending[call_id] = (loop, future)
            # When the child is gone the send fails and its reply thread fails the search
            # (it is pending).
            with contextlib.suppress(OSError):
                self._conn.send(("search", call_id, principal, query, time_left))
                if self._wake_owed:
                    self._wake_owed = False
                    self._conn.send(("notify",))
        return await future

    def notify(self, records: Sequence[Any] = ()) -> None:
        """The log grew: wake the indexer. Called on the log writer's thread, so it never
        waits: while the lock is taken the wake-up is owed, and the search being sent
        carries it (failing that, the indexer finds the records at its next poll)."""
        if not self._lock.acquire(blocking=False):
            self._wake_owed = True
            return
        try:
            if self._conn is not None:
                self._conn.send(("notify",))
        except OSError:
            pass
        finally:
            self._lock.release()

    def close(self) -> None:
        """Stops the search process: the indexer finishes its batch, the indexes close."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            conn, proc = self._conn, self._proc
            if conn is not None:
                with contextlib.suppress(OSError):
                    conn.send(("close",))
        self._dead.set()  # the keeper ends
        if self._receiver is not None:
            self._receiver.join(CLOSE_TIMEOUT_S)
        if conn is not None:
            conn.close()
        if proc is not None:
            _reap(proc)


def _reap(proc: subprocess.Popen[bytes]) -> int | None:
    """Waits for a child to exit (killed if it does not in time); its exit code."""
    try:
        return proc.wait(CLOSE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait()
