"""The search process: the indexer, both search lanes and `SearchEngine`, apart from the server.

`python -m recall_service.index_process`, started by `index_client.IndexProcess` with one end
of a socket. The server sends its settings first (over the socket, so that API keys never
show in a process list); this process opens the log (reads only), the projections (the
Tantivy index, the embedder, the vector index — Qdrant Edge in a worker process of its own,
as in the server), starts the indexer and answers `("ready",)`, or `("failed", message)`.

Then, in order of arrival:
- `("search", id, principal, query, time_left)` → `("answer", id, True, Answer)` or
  `("answer", id, False, encoded error)` (`cairn_server.error_transport`); searches run
  concurrently, as in the server: one without a `min_seq` straight on a search thread, which
  sends its answer; one with a `min_seq` on this process's event loop until the indexes hold
  it;
- `("notify",)`: the log grew (the indexer wakes);
- `("close",)`: stop the indexer, close everything, answer `("closed",)`.
And every quarter second, when they changed, the indexer's metrics:
`("metrics", [(name, labels, value), ...])`.

Why a process: in the server the indexer shared one GIL with gRPC and the log's writer, and
every write waited for it (docs/benchmarks.md, "Sustained writes").
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import threading
from collections.abc import Sequence
from concurrent.futures import Future
from functools import partial
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any

from cairn_server import event_loop
from cairn_server import log as server_log
from cairn_server.auth import Principal
from cairn_server.error_transport import encode_error
from cairn_server.errors import CairnError
from cairn_server.metrics import Metrics
from recall_service.child_process import become_child
from recall_service.core import Deps
from recall_service.search import Answer
from recall_service.search_query import SearchQuery
from recall_service.search_setup import open_projections
from recall_service.signing import load_or_create

if TYPE_CHECKING:
    from recall_service.server import RecallSettings

log = logging.getLogger("cairn.recall.index")

METRICS_SECONDS = 0.25
# The indexer's metric families, forwarded to the server's /metrics.
FORWARDED = (
    "cairn_index_lag_records",
    "cairn_index_lag_seconds",
    "cairn_vector_points_unoptimized",
    "cairn_embedded_texts_total",
    "cairn_embedding_seconds_total",
)
Sample = tuple[str, tuple[tuple[str, str], ...], float]


def metric_samples(metrics: Metrics) -> list[Sample]:
    """The forwarded families' current samples (name, sorted labels, value)."""
    out: list[Sample] = []
    for family in metrics.registry.collect():
        for sample in family.samples:
            if sample.name in FORWARDED:
                out.append((sample.name, tuple(sorted(sample.labels.items())), sample.value))
    return out


class Service:
    """What this process runs, once open: the indexer and `SearchEngine` as the server would
    run them in its own process (`server.search_engine`), over the log opened for reading."""

    def __init__(self, settings: RecallSettings) -> None:
        from recall_service.server import open_log_reader, search_engine

        self.metrics = Metrics("recall")
        projections = open_projections(settings.search_config())
        try:
            # Searches on their threads and the indexer read at once.
            self.store = open_log_reader(settings, pool_size=settings.search_threads + 2)
        except BaseException:
            projections.close()
            raise
        deps = Deps(
            store=self.store,
            signer=load_or_create(settings.resolved_data_dir()),
            max_content_bytes=settings.max_content_bytes,
            client_vectors=projections.client_vectors,
        )
        self.engine, start, self._close_search = search_engine(
            settings, deps, projections, self.metrics
        )
        start()

    def close(self) -> None:
        """Stops the indexer and closes everything."""
        self._close_search()
        self.store.close()


async def serve(conn: Connection, service: Service) -> None:
    """Answers the server until `close` arrives or the socket closes."""
    loop = asyncio.get_running_loop()
    inbox: asyncio.Queue[Any] = asyncio.Queue()

    def read() -> None:
        while True:
            try:
                message = conn.recv()
            except (EOFError, OSError):
                loop.call_soon_threadsafe(inbox.put_nowait, None)
                return
            if message[0] == "search" and started(message):
                continue
            loop.call_soon_threadsafe(inbox.put_nowait, message)
            if message[0] == "close":
                return

    sending = threading.Lock()  # replies go from the event loop and from search threads

    def send(message: tuple[Any, ...]) -> None:
        # When the server is gone the send fails; the reader sees it and this process ends.
        with sending, contextlib.suppress(EOFError, OSError):
            conn.send(message)

    def reply(call_id: int, done: Future[Answer]) -> None:
        error = done.exception()
        if error is None:
            send(("answer", call_id, True, done.result()))
        else:
            if not isinstance(error, CairnError):
                log.error("search failed", exc_info=error)
            send(("answer", call_id, False, encode_error(error)))

    def started(message: tuple[Any, ...]) -> bool:
        """A search without a `min_seq` goes straight to a search thread, whose reply is
        sent from there (two thread hops fewer than through the event loop)."""
        call_id, principal, query = message[1:4]
        try:
            future = service.engine.start(principal, query)
        except Exception as error:  # the caller's mistake, or a bug: either way, an answer
            if not isinstance(error, CairnError):
                log.exception("search failed")
            send(("answer", call_id, False, encode_error(error)))
            return True
        if future is None:
            return False
        future.add_done_callback(partial(reply, call_id))
        return True

    async def search(
        call_id: int, principal: Principal, query: SearchQuery, time_left: float | None
    ) -> None:
        try:
            answer = await service.engine.search(principal, query, time_left)
        except CairnError as error:
            send(("answer", call_id, False, encode_error(error)))
        except Exception as error:
            log.exception("search failed")
            send(("answer", call_id, False, encode_error(error)))
        else:
            send(("answer", call_id, True, answer))

    async def forward_metrics() -> None:
        last: list[Sample] = []
        while True:
            samples = metric_samples(service.metrics)
            if samples != last:
                send(("metrics", samples))
                last = samples
            await asyncio.sleep(METRICS_SECONDS)

    threading.Thread(target=read, name="cairn-index-inbox", daemon=True).start()
    tasks: set[asyncio.Task[None]] = set()
    metrics_task = asyncio.create_task(forward_metrics())
    while True:
        message = await inbox.get()
        if message is None or message[0] == "close":
            break
        if message[0] == "notify":
            service.engine.notify(())
        elif message[0] == "search":
            task = asyncio.create_task(search(*message[1:]))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
    metrics_task.cancel()
    for task in list(tasks):
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    service.close()
    if message is not None:
        send(("closed",))


def main(argv: Sequence[str] | None = None) -> None:
    """The child's entry point."""
    from recall_service.server import RecallSettings

    parser = argparse.ArgumentParser(description="Indexes and searches the recall log.")
    parser.add_argument("--fd", type=int, required=True)
    parser.add_argument("--parent", type=int, required=True)
    args = parser.parse_args(argv)
    conn = become_child(args.parent, args.fd)
    try:
        settings = RecallSettings.model_validate_json(conn.recv())
    except (EOFError, OSError):
        return
    server_log.configure(settings.log_level)
    try:
        service = Service(settings)
    except CairnError as error:
        conn.send(("failed", error.message))
        return
    except Exception as error:
        log.exception("the search process failed to start")
        conn.send(("failed", f"{type(error).__name__}: {error}"))
        return
    conn.send(("ready",))
    event_loop.run(serve(conn, service), settings.event_loop)


if __name__ == "__main__":
    main()
