"""Queries of the log stores, written once for SQLite and PostgreSQL (`cairn_server.sqldb`)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, Literal

from cairn_server.sqldb import Db
from recall_service.merkle import Coord
from recall_service.models import Checkpoint, Participant, Record, Stream, StreamKind
from recall_service.store.base import RecordQuery
from recall_service.store.sql_rows import (
    CHECKPOINT_COLUMNS,
    RECORD_COLUMNS,
    RECORD_WIDTH,
    REDACTED_BY,
    STREAM_COLUMNS,
    checkpoint_of,
    participant_of,
    record_of,
    stream_of,
)

# Rows per query when a whole stream is read: memory stays bounded, whichever database.
PAGE = 10_000
# Streams a reader keeps from one `get_streams` to the next (about 1 KB each).
STREAMS_KEPT = 10_000


class SqlLogReader:
    """Queries over one `Db`.

    `time_index` is what the overlap query's self-join names after `JOIN records a`: SQLite
    is told to use the time index (`INDEXED BY records_by_time`), which its planner would
    otherwise pass over for the primary key; PostgreSQL's planner needs no hint.
    """

    def __init__(self, db: Db, *, time_index: str = "") -> None:
        self._c = db
        self._time_index = time_index
        self._streams: dict[int, Stream] = {}  # by row key: see `get_streams`

    def get_stream(self, tenant: str, stream_id: str) -> Stream | None:
        """The stream, or None (also for another tenant's)."""
        row = self._c.execute(
            f"SELECT {STREAM_COLUMNS} FROM streams WHERE tenant = ? AND id = ?",
            (tenant, stream_id),
        ).fetchone()
        return None if row is None else stream_of(row)

    def get_streams(self, tenant: str, stream_ids: Sequence[str]) -> dict[str, Stream]:
        """The tenant's streams among `stream_ids`, by id.

        A search over many streams reads them all, every time. A stream's row changes only
        by an append, which grows its size, so a row key and a size name one state of a
        stream for good: the streams read before are kept by row key, and of a stream whose
        size has not moved since only the key and size are read again (100 streams: 0.2 ms
        rather than 0.6). A reader's queries see only committed rows; the transactions of
        the log's writer are readers of their own, gone when they end."""
        found: dict[str, Stream] = {}
        unique = list(dict.fromkeys(stream_ids))
        for start in range(0, len(unique), 500):
            chunk = unique[start : start + 500]
            marks = ",".join("?" * len(chunk))
            stale: list[int] = []
            for key, stream_id, size in self._c.execute(
                f"SELECT rowkey, id, size FROM streams WHERE tenant = ? AND id IN ({marks})",
                [tenant, *chunk],
            ).fetchall():
                known = self._streams.get(key)
                if known is not None and known.size == size:
                    found[stream_id] = known
                else:
                    stale.append(key)
            if not stale:
                continue
            if len(self._streams) + len(stale) > STREAMS_KEPT:
                self._streams.clear()
            marks = ",".join("?" * len(stale))
            for row in self._c.execute(
                f"SELECT {STREAM_COLUMNS} FROM streams WHERE rowkey IN ({marks})", stale
            ).fetchall():
                stream = self._streams[row[0]] = stream_of(row)
                found[stream.id] = stream
        return found

    def list_streams(
        self, tenant: str, *, after: int, limit: int, kind: StreamKind | None, agent: str | None
    ) -> list[tuple[int, Stream]]:
        """Up to `limit` streams after row key `after`, in creation order."""
        where = ""
        params: list[Any] = []
        if kind is not None:
            where += " AND kind = ?"
            params.append(int(kind))
        if agent is not None:
            where += (
                " AND rowkey IN (SELECT stream FROM participants"
                " WHERE agent_id = ? AND detached_seq = 0)"
            )
            params.append(agent)
        rows = self._c.execute(
            f"SELECT {STREAM_COLUMNS} FROM streams WHERE tenant = ? AND rowkey > ?{where}"
            " ORDER BY rowkey LIMIT ?",
            [tenant, after, *params, limit],
        ).fetchall()
        return [(row[0], stream_of(row)) for row in rows]

    def participant(self, stream: Stream, agent_id: str) -> Participant | None:
        """The agent's participant row (active or detached), or None."""
        found = self.participants(stream, [agent_id])
        return found.get(agent_id)

    def memberships(self, streams: Sequence[Stream], agent_id: str) -> dict[int, Participant]:
        """The agent's participant row in each of `streams`, by stream key."""
        found: dict[int, Participant] = {}
        keys = list(dict.fromkeys(s.key for s in streams))
        for start in range(0, len(keys), 500):
            chunk = keys[start : start + 500]
            marks = ",".join("?" * len(chunk))
            rows = self._c.execute(
                "SELECT stream, agent_id, role, attached_seq, attached_at, detached_seq"
                f" FROM participants WHERE agent_id = ? AND stream IN ({marks})",
                [agent_id, *chunk],
            ).fetchall()
            found.update((row[0], participant_of(row[1:])) for row in rows)
        return found

    def participants(self, stream: Stream, agent_ids: Sequence[str]) -> dict[str, Participant]:
        """Participant rows of several agents."""
        unique = list(dict.fromkeys(agent_ids))
        if not unique:
            return {}
        marks = ",".join("?" * len(unique))
        rows = self._c.execute(
            "SELECT agent_id, role, attached_seq, attached_at, detached_seq FROM participants"
            f" WHERE stream = ? AND agent_id IN ({marks})",
            [stream.key, *unique],
        ).fetchall()
        return {row[0]: participant_of(row) for row in rows}

    def membership_events(self, stream: Stream, upto_seq: int) -> list[Record]:
        """ATTACH and DETACH records up to `upto_seq`, in log order."""
        rows = self._c.execute(
            f"SELECT {RECORD_COLUMNS} FROM records r WHERE r.stream = ? AND r.seq <= ?"
            " AND r.kind IN (2, 3) ORDER BY r.seq",
            (stream.key, upto_seq),
        ).fetchall()
        return [record_of(stream.id, row) for row in rows]

    def record(self, stream: Stream, seq: int) -> Record | None:
        """One record."""
        row = self._c.execute(
            f"SELECT {RECORD_COLUMNS}, {REDACTED_BY} FROM records r"
            " WHERE r.stream = ? AND r.seq = ?",
            (stream.key, seq),
        ).fetchone()
        return None if row is None else record_of(stream.id, row, row[RECORD_WIDTH])

    def records(
        self, stream: Stream, query: RecordQuery, *, after: int, limit: int
    ) -> list[Record]:
        """Up to `limit` records matching `query`, after `after` in the query's order."""
        where: list[str] = []
        params: list[Any] = [stream.key]
        if after:
            where.append("r.seq < ?" if query.newest_first else "r.seq > ?")
            params.append(after)
        if not query.include_events:
            where.append("r.kind = 1")
        if query.authors:
            where.append(f"r.source_agent_id IN ({','.join('?' * len(query.authors))})")
            params.extend(query.authors)
        if query.first_seq:
            where.append("r.seq >= ?")
            params.append(query.first_seq)
        if query.last_seq:
            where.append("r.seq <= ?")
            params.append(query.last_seq)
        if query.start is not None:
            where.append("r.created_at >= ?")
            params.append(query.start)
        if query.end is not None:
            where.append("r.created_at < ?")
            params.append(query.end)
        if query.tags:
            marks = ",".join("?" * len(query.tags))
            having = " GROUP BY seq HAVING COUNT(*) = ?" if query.match_all_tags else ""
            where.append(
                f"r.seq IN (SELECT seq FROM record_tags WHERE stream = ? AND tag IN ({marks})"
                f"{having})"
            )
            params.extend([stream.key, *query.tags])
            if query.match_all_tags:
                params.append(len(set(query.tags)))
        clause = "".join(f" AND {w}" for w in where)
        order = "DESC" if query.newest_first else "ASC"
        rows = self._c.execute(
            f"SELECT {RECORD_COLUMNS}, {REDACTED_BY} FROM records r WHERE r.stream = ?{clause}"
            f" ORDER BY r.seq {order} LIMIT ?",
            [*params, limit],
        ).fetchall()
        return [record_of(stream.id, row, row[RECORD_WIDTH]) for row in rows]

    def by_idempotency_keys(self, stream: Stream, keys: Sequence[str]) -> dict[str, Record]:
        """Records written with these idempotency keys."""
        unique = [k for k in dict.fromkeys(keys) if k]
        records = self._records_where_in(stream, "idempotency_key", unique)
        return {record.idempotency_key: record for record in records}

    def overlapping(
        self, stream: Stream, within: int, *, after: tuple[int, int], limit: int
    ) -> list[tuple[Record, Record]]:
        """Pairs of MESSAGE records by different authors at most `within` µs apart."""
        a_columns = RECORD_COLUMNS.replace("r.", "a.")
        rows = self._c.execute(
            f"SELECT {RECORD_COLUMNS}, {a_columns} FROM records r"
            f" JOIN records a{self._time_index} ON a.stream = r.stream"
            " AND a.created_at >= r.created_at - ? AND a.created_at <= r.created_at"
            " AND a.seq < r.seq AND a.kind = 1 AND a.source_agent_id != r.source_agent_id"
            " WHERE r.stream = ? AND r.kind = 1 AND r.seq >= ? AND (r.seq, a.seq) > (?, ?)"
            " ORDER BY r.seq, a.seq LIMIT ?",
            (within, stream.key, after[0], after[0], after[1], limit),
        ).fetchall()
        return [
            (record_of(stream.id, row[RECORD_WIDTH:]), record_of(stream.id, row[:RECORD_WIDTH]))
            for row in rows
        ]

    def nodes(self, stream: Stream, coords: Sequence[Coord]) -> dict[Coord, bytes]:
        """Stored Merkle nodes; level-0 nodes are the records' leaf hashes.

        One statement of primary-key lookups, one per node (`UNION ALL`): a proof needs
        O(log n) of them, each a B-tree descent whatever the stream's size, and over a
        network one round trip for all of them.
        """
        if not coords:
            return {}
        parts: list[str] = []
        params: list[int] = []
        for level, index in coords:
            if level == 0:
                parts.append("SELECT 0, ?, leaf_hash FROM records WHERE stream = ? AND seq = ?")
                params += [index, stream.key, index + 1]
            else:
                parts.append(
                    "SELECT level, idx, hash FROM merkle_nodes"
                    " WHERE stream = ? AND level = ? AND idx = ?"
                )
                params += [stream.key, level, index]
        found: dict[Coord, bytes] = {}
        for start in range(0, len(parts), 100):  # SQLite allows 500 terms in a compound
            rows = self._c.execute(
                " UNION ALL ".join(parts[start : start + 100]), params[3 * start : 3 * start + 300]
            ).fetchall()
            for level, index, digest in rows:
                found[(level, index)] = digest
        return found

    def latest_checkpoint(self, stream: Stream) -> Checkpoint | None:
        """The checkpoint of the largest size."""
        row = self._c.execute(
            f"SELECT {CHECKPOINT_COLUMNS} FROM checkpoints WHERE stream = ?"
            " ORDER BY size DESC LIMIT 1",
            (stream.key,),
        ).fetchone()
        return None if row is None else checkpoint_of(stream, row)

    def iter_records(self, stream: Stream) -> Iterator[Record]:
        """Every stored record in seq order, exactly as stored (fetched a page at a time)."""
        after: int | None = None
        while True:
            bound = "" if after is None else " AND r.seq > ?"
            rows = self._c.execute(
                f"SELECT {RECORD_COLUMNS} FROM records r WHERE r.stream = ?{bound}"
                " ORDER BY r.seq LIMIT ?",
                (stream.key, *([] if after is None else [after]), PAGE),
            ).fetchall()
            for row in rows:
                yield record_of(stream.id, row)
            if len(rows) < PAGE:
                return
            after = rows[-1][0]

    def iter_nodes(self, stream: Stream) -> Iterator[tuple[Coord, bytes]]:
        """Every stored interior node (fetched a page at a time)."""
        after: tuple[int, int] | None = None
        while True:
            bound = "" if after is None else " AND (level, idx) > (?, ?)"
            rows = self._c.execute(
                f"SELECT level, idx, hash FROM merkle_nodes WHERE stream = ?{bound}"
                " ORDER BY level, idx LIMIT ?",
                (stream.key, *(after or ()), PAGE),
            ).fetchall()
            for level, index, digest in rows:
                yield (level, index), digest
            if len(rows) < PAGE:
                return
            after = (rows[-1][0], rows[-1][1])

    def iter_checkpoints(self, stream: Stream) -> Iterator[Checkpoint]:
        """Every stored checkpoint by size (fetched a page at a time)."""
        after: int | None = None
        while True:
            bound = "" if after is None else " AND size > ?"
            rows = self._c.execute(
                f"SELECT {CHECKPOINT_COLUMNS} FROM checkpoints WHERE stream = ?{bound}"
                " ORDER BY size LIMIT ?",
                (stream.key, *([] if after is None else [after]), PAGE),
            ).fetchall()
            for row in rows:
                yield checkpoint_of(stream, row)
            if len(rows) < PAGE:
                return
            after = rows[-1][0]

    # -- what the search indexer and the search read --------------------------------------

    def changed_streams(self, since: int) -> list[Stream]:
        """Streams of every tenant whose last record's time is at least `since` (µs; 0: all
        streams), in row-key order: the indexer's view of where the log has grown."""
        rows = self._c.execute(
            f"SELECT {STREAM_COLUMNS} FROM streams WHERE last_time >= ? ORDER BY rowkey",
            (since,),
        ).fetchall()
        return [stream_of(row) for row in rows]

    def messages_before(self, stream: Stream, seq: int, limit: int) -> list[Record]:
        """The `limit` MESSAGE records with content nearest below `seq`, in seq order."""
        rows = self._c.execute(
            f"SELECT {RECORD_COLUMNS} FROM records r WHERE r.stream = ? AND r.seq < ?"
            " AND r.kind = 1 AND r.content IS NOT NULL ORDER BY r.seq DESC LIMIT ?",
            (stream.key, seq, limit),
        ).fetchall()
        return [record_of(stream.id, row) for row in reversed(rows)]

    def messages_after(self, stream: Stream, seq: int, last: int, limit: int) -> list[Record]:
        """The first `limit` MESSAGE records with content in seqs (seq, last], in seq order."""
        rows = self._c.execute(
            f"SELECT {RECORD_COLUMNS} FROM records r WHERE r.stream = ? AND r.seq > ?"
            " AND r.seq <= ? AND r.kind = 1 AND r.content IS NOT NULL ORDER BY r.seq LIMIT ?",
            (stream.key, seq, last, limit),
        ).fetchall()
        return [record_of(stream.id, row) for row in rows]

    def records_between(self, stream: Stream, first: int, last: int) -> list[Record]:
        """Every record of seqs first..last (any kind, erased content as None), in seq order."""
        rows = self._c.execute(
            f"SELECT {RECORD_COLUMNS} FROM records r WHERE r.stream = ? AND r.seq >= ?"
            " AND r.seq <= ? ORDER BY r.seq",
            (stream.key, first, last),
        ).fetchall()
        return [record_of(stream.id, row) for row in rows]

    def records_across(self, wanted: Sequence[tuple[Stream, int]]) -> dict[tuple[int, int], Record]:
        """The records at these (stream, seq) that exist, by (stream key, seq): one query for
        up to 500 pairs, whichever streams they are in (a search's hits over 100 streams:
        0.15 ms against 0.3 a stream at a time). The pairs are a join's outer side, so each
        is one primary-key lookup; typed, so PostgreSQL compares them with the key's type."""
        ids = {stream.key: stream.id for stream, _ in wanted}
        pairs = list(dict.fromkeys((stream.key, seq) for stream, seq in wanted))
        found: dict[tuple[int, int], Record] = {}
        for start in range(0, len(pairs), 500):
            chunk = pairs[start : start + 500]
            values = ",".join(["(CAST(? AS BIGINT), CAST(? AS BIGINT))"] * len(chunk))
            rows = self._c.execute(
                f"WITH wanted (stream, seq) AS (VALUES {values})"
                f" SELECT r.stream, {RECORD_COLUMNS}, {REDACTED_BY} FROM wanted w"
                " JOIN records r ON r.stream = w.stream AND r.seq = w.seq",
                [x for pair in chunk for x in pair],
            ).fetchall()
            for row in rows:
                record = record_of(ids[row[0]], row[1:], row[1 + RECORD_WIDTH])
                found[(row[0], record.seq)] = record
        return found

    def _records_where_in(
        self, stream: Stream, column: Literal["seq", "idempotency_key"], values: Sequence[object]
    ) -> list[Record]:
        """The stream's records whose `column` is one of `values`, 500 values a query."""
        found: list[Record] = []
        for start in range(0, len(values), 500):
            chunk = values[start : start + 500]
            marks = ",".join("?" * len(chunk))
            rows = self._c.execute(
                f"SELECT {RECORD_COLUMNS}, {REDACTED_BY} FROM records r"
                f" WHERE r.stream = ? AND r.{column} IN ({marks})",
                [stream.key, *chunk],
            ).fetchall()
            found.extend(record_of(stream.id, row, row[RECORD_WIDTH]) for row in rows)
        return found

    def vectors(self, stream: Stream, first: int, last: int) -> dict[int, bytes]:
        """Client-supplied vectors of seqs first..last, by seq (float32 little-endian)."""
        rows = self._c.execute(
            "SELECT seq, vector FROM record_vectors WHERE stream = ? AND seq >= ? AND seq <= ?",
            (stream.key, first, last),
        ).fetchall()
        return {row[0]: bytes(row[1]) for row in rows}
