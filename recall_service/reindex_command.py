"""`cairn recall reindex [--stream S [--tenant T]]`: rebuild the search projections of one
recall process from the log alone.

It opens the log the server uses (the data directory's SQLite file, or `--database-url`) for
reading, and the server's index directory for writing. Run it with that server stopped: the
index directory's Tantivy lock refuses it while the server runs, and it says so. Against a
shared Qdrant server (`--qdrant-url`), replicas still running keep writing the same points:
every write is an overwrite by id, so the collection ends complete either way; each replica's
own Tantivy index is rebuilt with that replica stopped, pointing at its `--index-dir`.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from cairn_server.errors import CairnError
from recall_service.reindex import rebuild, streams_to_rebuild
from recall_service.search_setup import open_projections
from recall_service.server import add_search_flags, open_log_reader, settings_from_args


def add_command(recall_sub: Any) -> None:
    """Adds `reindex` under `cairn recall`."""
    parser = recall_sub.add_parser(
        "reindex", help="rebuild the search indexes from the log (with the server stopped)"
    )
    parser.add_argument("--stream", help="only this stream (by id)")
    parser.add_argument("--tenant", help="with --stream: the stream's tenant (default: any)")
    parser.add_argument("--data-dir", help="data directory (env CAIRN_DATA_DIR; default ~/.cairn)")
    parser.add_argument(
        "--database-url", help="the fleet's PostgreSQL log (env CAIRN_DATABASE_URL)"
    )
    parser.add_argument("--database-schema", help="PostgreSQL schema (default public)")
    parser.add_argument(
        "--port", type=int, help="with PostgreSQL: the port of the replica whose index-<port> dir"
    )
    add_search_flags(parser)
    parser.add_argument("--batch", type=int, default=2048, help="records per indexing step")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Runs the rebuild; prints what it did."""
    settings = settings_from_args(args)
    config = settings.search_config()
    store = open_log_reader(settings, pool_size=4)
    try:
        streams = streams_to_rebuild(store, args.stream, args.tenant) if args.stream else None
        projections = open_projections(config, rebuild=True)
        try:
            total = sum(s.size for s in (streams or streams_to_rebuild(store)))
            done = _with_progress(
                args,
                total,
                lambda tick: rebuild(
                    store, projections, streams, batch_records=args.batch, progress=tick
                ),
            )
        finally:
            projections.close()
    finally:
        store.close()
    data: dict[str, Any] = {
        "streams": done.streams,
        "records": done.records,
        "seconds": done.seconds,
        "records_per_s": round(done.records / done.seconds) if done.seconds else 0,
        "index_dir": str(config.index_dir),
        "embedder": projections.embedder.name,
        "vectors": config.qdrant_url or "qdrant-edge",
    }
    if args.json:
        print(json.dumps(data, sort_keys=True))
    else:
        print(
            f"rebuilt {data['records']} records of {data['streams']} streams in "
            f"{data['seconds']} s into {data['index_dir']} ({data['embedder']}, "
            f"{data['vectors']})"
        )
    return 0


def _with_progress(args: argparse.Namespace, total: int, work: Any) -> Any:
    """Runs `work(tick)` under a progress bar on stderr (none with --json or no terminal)."""
    if args.json or not sys.stderr.isatty():
        return work(lambda done: None)
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn

    with Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
        console=Console(stderr=True),
        transient=True,
    ) as bar:
        task = bar.add_task("reindexing", total=total)
        return work(lambda done: bar.update(task, completed=done))


def main(argv: list[str] | None = None) -> None:
    """`python -m recall_service.reindex_command` (the same as `cairn recall reindex`)."""
    parser = argparse.ArgumentParser(prog="cairn recall reindex")
    sub = parser.add_subparsers(dest="command", required=True)
    add_command(sub)
    args = parser.parse_args(["reindex", *(argv if argv is not None else sys.argv[1:])])
    try:
        sys.exit(run(args))
    except CairnError as error:
        print(f"cairn: {error.message}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
