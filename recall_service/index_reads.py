"""Reading what the indexer needs from the log: one `StreamSlice` per stream, through the
store interface (never SQL), inside one snapshot so a slice sees one committed state."""

from __future__ import annotations

from typing import Protocol

from recall_service.index_plan import Around, StreamSlice, window_sizes
from recall_service.models import Record, RecordKind, Stream
from recall_service.projections.documents import TextSettings


class SliceReader(Protocol):
    """The reads a slice takes (a subset of `store.base.LogReader`)."""

    def records_between(self, stream: Stream, first: int, last: int) -> list[Record]:
        """Every record of seqs first..last, in seq order."""
        ...

    def messages_before(self, stream: Stream, seq: int, limit: int) -> list[Record]:
        """The `limit` messages with content nearest below `seq`, in seq order."""
        ...

    def messages_after(self, stream: Stream, seq: int, last: int, limit: int) -> list[Record]:
        """The first `limit` messages with content in (seq, last], in seq order."""
        ...

    def vectors(self, stream: Stream, first: int, last: int) -> dict[int, bytes]:
        """Client-supplied vectors of seqs first..last."""
        ...


def read_slice(
    reader: SliceReader,
    stream: Stream,
    first: int,
    last: int,
    settings: TextSettings,
    with_vectors: bool = False,
) -> StreamSlice:
    """The records `first..last` of `stream`, the messages before them, and the messages
    around each record a REDACTION among them erased (when that record is below `first`)."""
    width = window_sizes(settings)
    new = reader.records_between(stream, first, last)
    before = reader.messages_before(stream, first, width) if width else []
    around: dict[int, Around] = {}
    for record in new:
        target = record.target_seq
        if record.kind is RecordKind.REDACTION and target < first and target not in around:
            around[target] = Around(
                before=tuple(reader.messages_before(stream, target, width)),
                after=tuple(reader.messages_after(stream, target, last, width)),
            )
    vectors: dict[int, bytes] = {}
    if with_vectors:
        low = min([first, *(r.seq for r in before)])
        vectors.update(reader.vectors(stream, low, last))
        for near in around.values():
            seqs = [r.seq for r in (*near.before, *near.after)]
            if seqs:
                vectors.update(reader.vectors(stream, min(seqs), max(seqs)))
    return StreamSlice(
        tenant=stream.tenant,
        stream_id=stream.id,
        first=first,
        last=last,
        new=tuple(new),
        before=tuple(before),
        around=around,
        vectors=vectors,
    )
