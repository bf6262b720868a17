"""The `LogStore` interface. Domain code sees only this; only stores see SQL.

Reads go through `reader()`; a read that must see one committed state across several
queries (verification) goes through `snapshot()`. Creating a stream runs in `transaction()`.
Appending to a stream runs in `append(tenant, stream_id)`, a unit of work that holds the
stream's append lock for its duration: SQLite takes its one write lock (BEGIN IMMEDIATE),
PostgreSQL takes a row lock on the stream (`SELECT ... FOR UPDATE`), so appends to one stream
are serialized while different streams append in parallel. Records, Merkle nodes and
checkpoints are only ever inserted; the only in-place changes are a redaction's erasure of
content and salt, and the participant table, which is a projection of the log's ATTACH and
DETACH records.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Protocol

from recall_service.merkle import Coord
from recall_service.models import Checkpoint, Participant, Record, Stream, StreamKind


@dataclass(frozen=True, slots=True)
class RecordQuery:
    """Filters of a Read. Times are µs; bounds of 0 / None are open."""

    authors: tuple[str, ...] = ()
    first_seq: int = 0
    last_seq: int = 0
    start: int | None = None
    end: int | None = None
    tags: tuple[str, ...] = ()
    match_all_tags: bool = False
    include_events: bool = False
    newest_first: bool = False


@dataclass(frozen=True, slots=True)
class StreamHead:
    """A stream's state after an append."""

    size: int
    head: bytes
    root: bytes
    last_time: int
    frontier: tuple[bytes, ...]


class LogReader(Protocol):
    """Queries; streams are looked up by tenant, everything else by the stream's key."""

    def get_stream(self, tenant: str, stream_id: str) -> Stream | None:
        """The stream, or None (also for another tenant's)."""

    def get_streams(self, tenant: str, stream_ids: Sequence[str]) -> dict[str, Stream]:
        """The tenant's streams among `stream_ids`, by id; the others are left out."""

    def list_streams(
        self, tenant: str, *, after: int, limit: int, kind: StreamKind | None, agent: str | None
    ) -> list[tuple[int, Stream]]:
        """Up to `limit` streams with row keys above `after`, in creation order; with `agent`,
        only streams it is attached to."""

    def participant(self, stream: Stream, agent_id: str) -> Participant | None:
        """The agent's participant row (active or detached), or None."""

    def memberships(self, streams: Sequence[Stream], agent_id: str) -> dict[int, Participant]:
        """The agent's participant row (active or detached) in each of `streams`, by stream
        key; streams where it has none are left out."""

    def participants(self, stream: Stream, agent_ids: Sequence[str]) -> dict[str, Participant]:
        """Participant rows of several agents; missing ones are left out."""

    def membership_events(self, stream: Stream, upto_seq: int) -> list[Record]:
        """ATTACH and DETACH records with seq <= upto_seq, in log order."""

    def record(self, stream: Stream, seq: int) -> Record | None:
        """One record."""

    def records(
        self, stream: Stream, query: RecordQuery, *, after: int, limit: int
    ) -> list[Record]:
        """Up to `limit` records matching `query`, after seq `after` in the query's order
        (0: from the start; newest-first reads use `after` as "before")."""

    def by_idempotency_keys(self, stream: Stream, keys: Sequence[str]) -> dict[str, Record]:
        """Records written with these idempotency keys."""

    def overlapping(
        self, stream: Stream, within: int, *, after: tuple[int, int], limit: int
    ) -> list[tuple[Record, Record]]:
        """Up to `limit` pairs (earlier, later) of MESSAGE records by different authors at
        most `within` µs apart, ordered by (later.seq, earlier.seq), after `after`."""

    def nodes(self, stream: Stream, coords: Sequence[Coord]) -> dict[Coord, bytes]:
        """Stored Merkle nodes; level-0 nodes are the records' leaf hashes."""

    def latest_checkpoint(self, stream: Stream) -> Checkpoint | None:
        """The checkpoint of the largest size."""

    def iter_records(self, stream: Stream) -> Iterator[Record]:
        """Every stored record in seq order, exactly as stored (for verification)."""

    def iter_nodes(self, stream: Stream) -> Iterator[tuple[Coord, bytes]]:
        """Every stored interior node (level >= 1)."""

    def iter_checkpoints(self, stream: Stream) -> Iterator[Checkpoint]:
        """Every stored checkpoint by size."""

    def changed_streams(self, since: int) -> list[Stream]:
        """Streams of every tenant whose last record's time is at least `since` (µs; 0: all),
        in row-key order (the search indexer's tail query)."""

    def messages_before(self, stream: Stream, seq: int, limit: int) -> list[Record]:
        """The `limit` MESSAGE records with content nearest below `seq`, in seq order."""

    def messages_after(self, stream: Stream, seq: int, last: int, limit: int) -> list[Record]:
        """The first `limit` MESSAGE records with content in seqs (seq, last], in seq order."""

    def records_between(self, stream: Stream, first: int, last: int) -> list[Record]:
        """Every record of seqs first..last (any kind, erased content as None), in seq order."""

    def records_across(self, wanted: Sequence[tuple[Stream, int]]) -> dict[tuple[int, int], Record]:
        """The records at these (stream, seq) that exist, by (stream key, seq), whichever
        streams they are in."""

    def vectors(self, stream: Stream, first: int, last: int) -> dict[int, bytes]:
        """Client-supplied vectors of seqs first..last, by seq."""


class LogTx(LogReader, Protocol):
    """Writes inside one unit of work."""

    def insert_stream(self, stream: Stream) -> Stream:
        """Stores a new stream; returns it with its key. Raises AlreadyExists when the tenant
        has a stream of that id (also one a concurrent transaction committed first)."""

    def append(
        self,
        stream: Stream,
        records: Sequence[Record],
        nodes: dict[Coord, bytes],
        head: StreamHead,
        checkpoint: Checkpoint,
    ) -> Stream:
        """Inserts records, their new interior nodes and a checkpoint, moves the head;
        returns the stream as it is now."""

    def set_participant(self, stream: Stream, participant: Participant) -> None:
        """Inserts or replaces the agent's participant row."""

    def erase_content(self, stream: Stream, seq: int) -> None:
        """Sets a record's content and salt to NULL and drops its vector (a redaction)."""

    def put_vectors(self, stream: Stream, vectors: Sequence[tuple[int, bytes]]) -> None:
        """Stores client-supplied vectors of records appended in this unit, by seq."""


class LogStore(Protocol):
    """A log store."""

    def reader(self) -> LogReader:
        """Queries, on a connection the calling thread may use."""

    def snapshot(self) -> AbstractContextManager[LogReader]:
        """Queries that all see one committed state, however many statements they take
        (SQLite: a read transaction; PostgreSQL: REPEATABLE READ, READ ONLY)."""

    def transaction(self) -> AbstractContextManager[LogTx]:
        """A unit of work: commits on normal exit, rolls back on an exception."""

    def group(self) -> AbstractContextManager[None]:
        """A scope whose units of work commit together, durably, when it exits (SQLite: one
        transaction with a savepoint per unit, one fsync for all). A unit that fails rolls
        back alone. A store whose units commit independently may make this a no-op."""

    def append(
        self, tenant: str, stream_id: str
    ) -> AbstractContextManager[tuple[LogTx, Stream | None]]:
        """A unit of work holding the stream's append lock, with the stream as locked (None
        when there is no such stream in the tenant)."""

    def purge_erased(self) -> None:
        """After a redaction: once it commits, removes the erased content from the store's
        own files as far as the database allows (SQLite: truncate the WAL; PostgreSQL:
        VACUUM the records table, which drops the old row version; see
        docs/recall-service.md for what remains in WAL archives and backups)."""

    def close(self) -> None:
        """Releases connections."""
