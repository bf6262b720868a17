"""Wires the recall service together and serves it."""

from __future__ import annotations

import argparse
import logging
import sys
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Literal

import psycopg
from psycopg_pool import PoolTimeout
from pydantic import Field

from cairn.v1 import recall_pb2, recall_pb2_grpc
from cairn_server import event_loop, log
from cairn_server.auth import Authenticator, KeyStore
from cairn_server.errors import CairnError
from cairn_server.keys_postgres import PostgresKeyStore
from cairn_server.keys_sqlite import SqliteKeyStore
from cairn_server.metrics import Metrics
from cairn_server.rpc import RpcGuard
from cairn_server.runner import Runner
from cairn_server.server import Hooks, StartupError, check_security, run_server
from cairn_server.settings import SERVER_ENV, ServerSettings, add_server_flags, settings_from
from recall_service.core import Deps
from recall_service.index_client import IndexProcess
from recall_service.indexer import Indexer, IndexerSettings
from recall_service.models import Record
from recall_service.projection_set import Projections
from recall_service.search import SearchEngine, Searcher, SearchSettings
from recall_service.search_setup import SearchConfig, client_vectors_of, open_projections
from recall_service.servicer import RecallServicer
from recall_service.signing import load_or_create
from recall_service.store.base import LogStore
from recall_service.store.postgres import PostgresRecallStore
from recall_service.store.sqlite import SqliteLogStore
from recall_service.validation import DEFAULT_MAX_CONTENT_BYTES

DEFAULT_PORT = 50052
# How often the embedded log's WAL is folded into the database, off the writer's commits.
WAL_CHECKPOINT_SECONDS = 2.0
SERVICE_NAME = recall_pb2.DESCRIPTOR.services_by_name["RecallService"].full_name


class RecallSettings(ServerSettings):
    """Settings of the recall service."""

    max_content_bytes: int = Field(default=DEFAULT_MAX_CONTENT_BYTES, ge=1)
    database_url: str = ""
    database_schema: str = "public"
    # Search (docs/search.md).
    index_dir: Path | None = None
    embedder: Literal["wordllama", "openai", "client"] = "wordllama"
    embedding_dim: int = Field(default=0, ge=0)
    embedding_url: str = ""
    embedding_model: str = ""
    embedding_api_key: str = ""
    qdrant_url: str = ""
    qdrant_api_key: str = ""
    qdrant_collection: str = "cairn_records"
    edge_inline: bool = False
    index_inline: bool = False
    index_batch: int = Field(default=1024, ge=1)
    index_poll_seconds: float = Field(default=0.25, gt=0)
    index_nice: int = Field(default=0, ge=0, le=19)
    search_wait_seconds: float = Field(default=5.0, ge=0)
    search_threads: int = Field(default=4, ge=1)

    def default_index_dir(self) -> Path:
        """`<data dir>/index`; on PostgreSQL `<data dir>/index-<port>`, since replicas of a
        fleet may share a data directory (for the signing key) but never a port."""
        name = f"index-{self.port}" if self.database_url else "index"
        return self.resolved_data_dir() / name

    def search_config(self) -> SearchConfig:
        """Where the projections live and what embeds."""
        return SearchConfig(
            index_dir=(self.index_dir or self.default_index_dir()).expanduser(),
            embedder=self.embedder,
            embedding_dim=self.embedding_dim,
            embedding_url=self.embedding_url,
            embedding_model=self.embedding_model,
            embedding_api_key=self.embedding_api_key,
            qdrant_url=self.qdrant_url,
            qdrant_api_key=self.qdrant_api_key,
            qdrant_collection=self.qdrant_collection,
            edge_process=not self.edge_inline,
        )


RECALL_ENV = {
    **SERVER_ENV,
    "port": "CAIRN_RECALL_PORT",
    "metrics_port": "CAIRN_RECALL_METRICS_PORT",
    "max_content_bytes": "CAIRN_RECALL_MAX_CONTENT_BYTES",
    "database_url": "CAIRN_DATABASE_URL",
    "database_schema": "CAIRN_DATABASE_SCHEMA",
    "index_dir": "CAIRN_INDEX_DIR",
    "embedder": "CAIRN_EMBEDDER",
    "embedding_dim": "CAIRN_EMBEDDING_DIM",
    "embedding_url": "CAIRN_EMBEDDING_URL",
    "embedding_model": "CAIRN_EMBEDDING_MODEL",
    "embedding_api_key": "CAIRN_EMBEDDING_API_KEY",
    "qdrant_url": "CAIRN_QDRANT_URL",
    "qdrant_api_key": "CAIRN_QDRANT_API_KEY",
    "qdrant_collection": "CAIRN_QDRANT_COLLECTION",
    "edge_inline": "CAIRN_EDGE_INLINE",
    "index_inline": "CAIRN_INDEX_INLINE",
    "index_nice": "CAIRN_INDEX_NICE",
    "search_wait_seconds": "CAIRN_SEARCH_WAIT_SECONDS",
}


def add_search_flags(parser: argparse.ArgumentParser) -> None:
    """Where the search projections live and what fills the vector lane (serve, reindex).
    API keys come from the environment only (CAIRN_EMBEDDING_API_KEY, CAIRN_QDRANT_API_KEY)."""
    parser.add_argument(
        "--index-dir",
        help="search indexes of this process (env CAIRN_INDEX_DIR; default <data dir>/index, "
        "on PostgreSQL <data dir>/index-<port>)",
    )
    parser.add_argument(
        "--embedder",
        choices=["wordllama", "openai", "client"],
        help="what embeds records (env CAIRN_EMBEDDER; default wordllama, bundled and offline)",
    )
    parser.add_argument(
        "--embedding-dim", type=int, help="vector size: openai/client (wordllama: 256 or less)"
    )
    parser.add_argument("--embedding-url", help="OpenAI-compatible base URL, e.g. http://h/v1")
    parser.add_argument("--embedding-model", help="model name sent to --embedding-url")
    parser.add_argument(
        "--qdrant-url",
        help="a Qdrant server shared by replicas, over gRPC (env CAIRN_QDRANT_URL); "
        "default: Qdrant Edge in --index-dir",
    )
    parser.add_argument("--qdrant-collection", help="collection name (default cairn_records)")
    parser.add_argument(
        "--edge-inline",
        action="store_true",
        default=None,
        help="run Qdrant Edge inside this process instead of a child process of its own "
        "(its calls then hold this process's GIL: a search-graph build stops every RPC)",
    )


def add_flags(parser: argparse.ArgumentParser) -> None:
    """The recall service's flags."""
    add_server_flags(parser, DEFAULT_PORT)
    parser.add_argument(
        "--max-content-bytes",
        type=int,
        help=f"largest record content in UTF-8 bytes (default {DEFAULT_MAX_CONTENT_BYTES})",
    )
    parser.add_argument(
        "--database-url",
        help="PostgreSQL URL for a fleet (env CAIRN_DATABASE_URL); default: SQLite in the data dir",
    )
    parser.add_argument("--database-schema", help="PostgreSQL schema (default public)")
    add_search_flags(parser)
    parser.add_argument(
        "--index-inline",
        action="store_true",
        default=None,
        help="run the indexer and the searches in this process instead of a child process "
        "of their own (they then share this process's GIL with every write: fewer writes/s)",
    )
    parser.add_argument("--index-batch", type=int, help="records per indexing step (1024)")
    parser.add_argument(
        "--index-poll-seconds", type=float, help="how often to look for other replicas' writes"
    )
    parser.add_argument(
        "--index-nice",
        type=int,
        help="how much lower the indexer thread's CPU priority is than the RPCs' "
        "(env CAIRN_INDEX_NICE; a nice value added on Linux, 0-19; default 0, level; 9 puts it "
        "with Qdrant Edge's graph build: more writes/s on busy cores, staler searches)",
    )
    parser.add_argument(
        "--search-wait-seconds", type=float, help="longest min_seq wait of a Search (5)"
    )
    parser.add_argument("--search-threads", type=int, help="threads running searches (4)")


def settings_from_args(args: argparse.Namespace) -> RecallSettings:
    """Settings from flags and the environment."""
    return settings_from(RecallSettings, args, RECALL_ENV, DEFAULT_PORT)


def count_appends(
    metrics: Metrics, then: Callable[[Sequence[Record]], None] | None = None
) -> Callable[[Sequence[Record]], None]:
    """Counts durable records by kind (the store calls this after each commit), then calls
    `then` (the indexer's wake-up)."""

    def count(records: Sequence[Record]) -> None:
        for kind, n in Counter(r.kind.name.lower() for r in records).items():
            metrics.log_appends.labels(kind).inc(n)
        if then is not None:
            then(records)

    return count


def search_engine(
    settings: RecallSettings, deps: Deps, projections: Projections, metrics: Metrics
) -> tuple[SearchEngine, Callable[[], None], Callable[[], None]]:
    """The indexer and the search engine in the calling process (the server with
    `--index-inline`, or the search process): the engine, what starts the indexer and what
    closes all three."""
    indexer = Indexer(
        deps.store,
        projections,
        IndexerSettings(
            batch_records=settings.index_batch,
            poll_seconds=settings.index_poll_seconds,
            nice=settings.index_nice,
        ),
        metrics,
    )
    engine = SearchEngine(
        deps,
        projections,
        indexer,
        SearchSettings(
            max_wait_seconds=settings.search_wait_seconds, threads=settings.search_threads
        ),
    )

    def close() -> None:
        indexer.stop()
        engine.close()
        projections.close()

    return engine, indexer.start, close


def open_log_reader(settings: RecallSettings, pool_size: int) -> LogStore:
    """The log, opened by a process that only reads it (the search process, a reindex):
    no `on_append`, and on PostgreSQL a pool of `pool_size` connections."""
    if settings.database_url:
        return PostgresRecallStore(
            settings.database_url, settings.database_schema, pool_size=pool_size
        )
    return SqliteLogStore(settings.resolved_data_dir())


async def serve(settings: RecallSettings) -> None:
    """Runs the recall service until SIGTERM."""
    check_security(settings, "recall")
    data_dir = settings.resolved_data_dir()
    data_dir.mkdir(parents=True, exist_ok=True)
    metrics = Metrics("recall")
    config = settings.search_config()
    projections: Projections | None = None
    try:
        if settings.index_inline:
            projections = open_projections(config)
            client_vectors = projections.client_vectors
        else:
            client_vectors = client_vectors_of(config)
    except CairnError as error:
        raise StartupError(error.message) from None
    wake: list[Callable[[Sequence[Record]], None]] = []

    def notify(records: Sequence[Record]) -> None:
        for callback in wake:
            callback(records)

    store: LogStore
    keys: KeyStore | None
    if settings.database_url:
        try:
            pg = PostgresRecallStore(
                settings.database_url,
                settings.database_schema,
                on_append=count_appends(metrics, notify),
            )
            keys = (
                None
                if settings.insecure_local
                else PostgresKeyStore(settings.database_url, settings.database_schema)
            )
        except (ValueError, psycopg.Error, PoolTimeout) as error:
            if projections is not None:
                projections.close()
            raise StartupError(f"cannot open the PostgreSQL log store: {error}") from None
        store = pg
        # Appends to different streams run in parallel; the database serializes each
        # stream's appends and aborts a unit of work on a conflict, which runs again.
        runner = Runner(inline_reads=False, write_threads=8, retry_on=pg.retryable)
    else:
        sqlite_store = SqliteLogStore(
            data_dir,
            on_append=count_appends(metrics, notify),
            checkpoint_seconds=WAL_CHECKPOINT_SECONDS,
        )
        store = sqlite_store
        keys = None if settings.insecure_local else SqliteKeyStore(data_dir)
        # Group commit: concurrent writes share one transaction and one fsync, each in its
        # own savepoint, and are answered after the commit that makes them durable.
        runner = Runner(inline_reads=True, batch=sqlite_store.group)
    # The signing key is a file in the data directory on either store: replicas of a fleet
    # mount the same key (docs/recall-service.md).
    deps = Deps(
        store=store,
        signer=load_or_create(data_dir),
        max_content_bytes=settings.max_content_bytes,
        client_vectors=client_vectors,
    )
    search: Searcher
    if projections is not None:
        search, start_search, close_search = search_engine(settings, deps, projections, metrics)
    else:
        try:
            index = IndexProcess(settings, metrics)
        except CairnError as error:
            runner.close()
            store.close()
            if keys is not None:
                keys.close()
            raise StartupError(error.message) from None
        search, close_search = index, index.close

        def start_search() -> None:
            pass

    wake.append(search.notify)
    servicer = RecallServicer(
        deps,
        RpcGuard(Authenticator(keys, insecure_local=settings.insecure_local), metrics),
        runner,
        search,
    )

    def register(server: object) -> list[str]:
        recall_pb2_grpc.add_RecallServiceServicer_to_server(servicer, server)  # type: ignore[arg-type]
        return [SERVICE_NAME]

    async def start() -> None:
        start_search()

    def close() -> None:
        runner.close()
        close_search()
        store.close()
        if keys is not None:
            keys.close()

    await run_server(settings, "recall", Hooks(register, start, [close]), metrics)


def main(argv: list[str] | None = None) -> None:
    """`python -m recall_service`: the same as `cairn recall serve`."""
    parser = argparse.ArgumentParser(prog="python -m recall_service", description=__doc__)
    add_flags(parser)
    settings = settings_from_args(parser.parse_args(argv))
    log.configure(settings.log_level, settings.access_log)
    logging.getLogger("cairn.recall").debug("settings", extra={"settings": settings.model_dump()})
    try:
        event_loop.run(serve(settings), settings.event_loop)
    except StartupError as error:
        print(f"recall service: {error}", file=sys.stderr)
        sys.exit(2)
