"""Qdrant Edge in a child process: `EdgeWorkerIndex`, a `VectorIndex` that forwards each call.

Qdrant Edge's Python binding holds the GIL for a call's whole run: about a millisecond for a
search, several for an upsert of a chunk, and tens of seconds for the search-graph build
(`optimize`) at 100k records. Inside the server that stops every other thread — gRPC's, the
log's writer, the other searches — for as long. Here the shard lives in a process of its own
(`python -m recall_service.projections.vector_worker`), and the server's threads wait for its
replies on a socket, without the GIL.

While the child builds its search graph it answers nothing else: a search that arrives
meanwhile raises `VectorIndexBusy` at once rather than waiting for the build (the search
service answers from the lexical lane and says so); upserts wait for the build to end.

The child dies with the server (`PR_SET_PDEATHSIG` on Linux; anywhere, it exits when the
socket closes). When it dies on its own, the next call starts another on the same shard,
which recovers what was acknowledged from its WAL.
"""

from __future__ import annotations

import argparse
import logging
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from cairn_server.errors import CairnError, FailedPrecondition, InvalidArgument, Unavailable
from recall_service.child_process import become_child
from recall_service.projections.documents import IndexedRecord, RecordKey
from recall_service.projections.embedders import Vectors
from recall_service.projections.filters import SearchFilter
from recall_service.projections.hits import LaneHit
from recall_service.projections.vectors import QdrantEdgeIndex, check_batch, payload, query_vector

log = logging.getLogger("cairn.recall.vectors")

# The calls the child carries out, by name (`search` and `count` as `_search` and `_count`).
_OPS = frozenset({"upsert_payloads", "delete", "last_applied", "optimize", "reset", "flush"})
START_TIMEOUT_S = 60.0
# How long a starting child retries a shard still locked by a predecessor that is exiting.
LOCKED_RETRY_S = 10.0
CLOSE_TIMEOUT_S = 60.0


class VectorIndexBusy(Unavailable):
    """The vector index is building its search graph and cannot answer a search now."""


class EdgeWorkerIndex:
    """A Qdrant Edge shard under `path`, served by a child process (see the module)."""

    def __init__(self, path: Path, dim: int, quantize: bool = True) -> None:
        self._path = path
        self._dim = dim
        self._quantize = quantize
        self._lock = threading.Lock()  # one call in flight on the socket
        self._building_since: float | None = None
        self._marks: dict[str, int] = {}
        self._proc: subprocess.Popen[bytes] | None = None
        self._conn: Connection | None = None
        self._closed = False
        with self._lock:
            self._start()

    # -- the child ------------------------------------------------------------------------

    def _start(self) -> None:
        """Starts the child and waits until its shard is open (the lock is held)."""
        parent, child = socket.socketpair()
        try:
            command = [
                sys.executable,
                "-m",
                "recall_service.projections.vector_worker",
                "--fd",
                str(child.fileno()),
                "--path",
                str(self._path),
                "--dim",
                str(self._dim),
                "--parent",
                str(os.getpid()),
            ]
            if self._quantize:
                command.append("--quantize")
            self._proc = subprocess.Popen(command, pass_fds=(child.fileno(),))
        finally:
            child.close()
        self._conn = Connection(parent.detach())
        if not self._conn.poll(START_TIMEOUT_S):
            self._stop_child()
            raise Unavailable(f"the vector index process did not start in {START_TIMEOUT_S:.0f} s")
        try:
            self._unwrap(self._conn.recv())
        except (EOFError, OSError):
            code = self._stop_child()
            raise Unavailable(f"the vector index process exited at start (code {code})") from None
        except CairnError:
            self._stop_child()
            raise

    def _stop_child(self) -> int | None:
        """Closes the socket and reaps the child (killed if it does not exit in time)."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        code = None
        if self._proc is not None:
            try:
                code = self._proc.wait(CLOSE_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                code = self._proc.wait()
            self._proc = None
        return code

    @staticmethod
    def _unwrap(reply: tuple[str, Any, Any]) -> Any:
        status, value, message = reply
        if status == "ok":
            return value
        if status == "failed_precondition":
            raise FailedPrecondition(message)
        if status == "invalid_argument":
            raise InvalidArgument(value, message)
        raise Unavailable(f"the vector index failed: {message}")

    def _call(self, op: str, *args: Any, busy_fails: bool = False) -> Any:
        """One call to the child. With `busy_fails`, raises `VectorIndexBusy` instead of
        waiting while a search-graph build holds the child."""
        self._send(op, args, busy_fails)
        return self._receive(op)

    def _send(self, op: str, args: tuple[Any, ...], busy_fails: bool) -> None:
        """Takes the socket and sends one call; the socket stays taken until `_receive`
        (released here only when the send fails)."""
        if busy_fails:
            while not self._lock.acquire(timeout=0.05):
                if self._building_since is not None:
                    raise self._busy()
        else:
            self._lock.acquire()
        try:
            if self._closed:
                raise Unavailable("the vector index is closed")
            if self._conn is None or (self._proc is not None and self._proc.poll() is not None):
                code = self._stop_child()
                log.warning("vector index process exited; starting another", extra={"code": code})
                self._start()
            assert self._conn is not None
            try:
                self._conn.send((op, args))
            except OSError:
                raise self._lost(op) from None
        except BaseException:
            self._lock.release()
            raise

    def _receive(self, op: str) -> Any:
        """The reply to the call `_send` sent; gives the socket back."""
        try:
            assert self._conn is not None
            try:
                reply = self._conn.recv()
            except (EOFError, OSError):
                raise self._lost(op) from None
            return self._unwrap(reply)
        finally:
            self._lock.release()

    def _lost(self, op: str) -> Unavailable:
        code = self._stop_child()
        return Unavailable(
            f"the vector index process exited during '{op}' (code {code}); "
            "the next call starts another"
        )

    def _busy(self) -> VectorIndexBusy:
        since = self._building_since or time.monotonic()
        return VectorIndexBusy(
            "the vector index is building its search graph "
            f"(for {time.monotonic() - since:.0f} s so far): search LEXICAL, or retry shortly"
        )

    # -- VectorIndex ----------------------------------------------------------------------

    @property
    def dim(self) -> int:
        """The dimension of every stored vector."""
        return self._dim

    @property
    def building(self) -> bool:
        """True while the child builds its search graph."""
        return self._building_since is not None

    def upsert(
        self, records: Sequence[IndexedRecord], vectors: Vectors, marks: Mapping[str, int]
    ) -> None:
        """Records and markers in one upsert (one WAL entry in the child)."""
        check_batch(self, records, vectors)
        self._call("upsert_payloads", vectors, [payload(r) for r in records], dict(marks))
        self._marks.update(marks)

    def delete(self, stream_id: str, seqs: Iterable[int], marks: Mapping[str, int]) -> None:
        """Removes records, then moves the markers."""
        self._call("delete", stream_id, list(seqs), dict(marks))
        self._marks.update(marks)

    def last_applied(self, stream_id: str) -> int:
        """The stream's marker, asked of the child once and then tracked; `VectorIndexBusy`
        instead of waiting for a search-graph build."""
        if stream_id not in self._marks:
            self._marks[stream_id] = int(self._call("last_applied", stream_id, busy_fails=True))
        return self._marks[stream_id]

    def search(self, vector: Vectors, top_k: int, flt: SearchFilter) -> list[LaneHit]:
        """Filtered nearest neighbours; `VectorIndexBusy` during a search-graph build."""
        return self.search_started(vector, top_k, flt)()

    def search_started(
        self, vector: Vectors, top_k: int, flt: SearchFilter
    ) -> Callable[[], list[LaneHit]]:
        """Sends a search to the child and returns what waits for its hits: the caller
        works meanwhile (the lexical lane) and must call it, once, even if that work fails
        (until then no other call reaches the child). `VectorIndexBusy` during a build."""
        query_vector(self, vector)
        if top_k < 1:
            return list
        if self._building_since is not None:
            raise self._busy()
        self._send("search", (vector, top_k, _filter_row(flt)), busy_fails=True)

        def hits() -> list[LaneHit]:
            rows = self._receive("search")
            return [LaneHit(RecordKey(stream, seq), score) for stream, seq, score in rows]

        return hits

    def count(self, flt: SearchFilter) -> int:
        """How many records pass `flt`."""
        return int(self._call("count", _filter_row(flt)))

    def optimize(self) -> bool:
        """Builds the search graph in the child; searches meanwhile raise `VectorIndexBusy`."""
        self._building_since = time.monotonic()
        try:
            return bool(self._call("optimize"))
        finally:
            self._building_since = None

    def flush(self) -> None:
        """Writes every applied change into the segments."""
        self._call("flush")

    def reset(self) -> None:
        """Removes every record and marker."""
        self._call("reset")
        self._marks.clear()

    def close(self) -> None:
        """Flushes and closes the shard, and lets the child exit."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            if self._conn is not None:
                try:
                    self._conn.send(("close", ()))
                    self._unwrap(self._conn.recv())
                except (EOFError, OSError):
                    pass
            self._stop_child()


# Plain tuples cross the socket: pickling a slotted dataclass costs ~7 µs, a tuple ~0.1.
FilterRow = tuple[
    str, tuple[str, ...], tuple[str, ...], float | None, float | None, tuple[str, ...],
    tuple[str, ...],
]  # fmt: skip


def _filter_row(flt: SearchFilter) -> FilterRow:
    return (flt.tenant, flt.stream_ids, flt.authors, flt.start, flt.end, flt.tags_any, flt.tags_all)


def _search(
    index: QdrantEdgeIndex, vector: Vectors, top_k: int, row: FilterRow
) -> list[tuple[str, int, float]]:
    hits = index.search(vector, top_k, SearchFilter(*row))
    return [(h.key.stream_id, h.key.seq, h.score) for h in hits]


def _count(index: QdrantEdgeIndex, row: FilterRow) -> int:
    return index.count(SearchFilter(*row))


# -- the child process --------------------------------------------------------------------


def _open_shard(path: Path, dim: int, quantize: bool) -> QdrantEdgeIndex:
    """Opens the shard, retrying while a predecessor still holds its WAL lock."""
    deadline = time.monotonic() + LOCKED_RETRY_S
    while True:
        try:
            return QdrantEdgeIndex(path, dim, quantize)
        except CairnError:
            raise
        except Exception as error:
            if "WouldBlock" not in str(error) or time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def _error_reply(error: BaseException) -> tuple[str, Any, str]:
    if isinstance(error, FailedPrecondition):
        return ("failed_precondition", None, error.message)
    if isinstance(error, InvalidArgument):
        return ("invalid_argument", error.field, error.description)
    return ("error", None, f"{type(error).__name__}: {error}")


def serve(conn: Connection, index: QdrantEdgeIndex) -> None:
    """Answers calls until the socket closes or a `close` arrives."""
    while True:
        try:
            op, args = conn.recv()
        except (EOFError, OSError):
            break
        if op == "close":
            index.close()
            conn.send(("ok", None, ""))
            return
        try:
            if op == "search":
                result: Any = _search(index, *args)
            elif op == "count":
                result = _count(index, *args)
            elif op in _OPS:
                result = getattr(index, op)(*args)
            else:
                raise ValueError(f"unknown call {op!r}")
            reply: tuple[str, Any, str] = ("ok", result, "")
        except Exception as error:  # every failure goes back to the caller
            reply = _error_reply(error)
        try:
            conn.send(reply)
        except (EOFError, OSError):
            break
    index.close()


def main(argv: Sequence[str] | None = None) -> None:
    """The child's entry point."""
    parser = argparse.ArgumentParser(description="Serves a Qdrant Edge shard to its parent.")
    parser.add_argument("--fd", type=int, required=True)
    parser.add_argument("--path", type=Path, required=True)
    parser.add_argument("--dim", type=int, required=True)
    parser.add_argument("--parent", type=int, required=True)
    parser.add_argument("--quantize", action="store_true")
    args = parser.parse_args(argv)
    conn = become_child(args.parent, args.fd)
    try:
        index = _open_shard(args.path, args.dim, args.quantize)
    except Exception as error:
        conn.send(_error_reply(error))
        return
    conn.send(("ok", None, ""))
    serve(conn, index)


if __name__ == "__main__":
    main()
