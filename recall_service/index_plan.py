"""What the indexer writes for a slice of a stream's log: pure functions over log records.

A record is indexed under its body and a context of neighbouring records
(`projections.documents`). Here the neighbours of a record are the nearest MESSAGE records
*with content* of the same stream, counted in messages: events (attach, detach, redaction)
and erased records are skipped. So the text a record is indexed under is a function of the
log alone, whatever batches the indexer happened to read it in, and a rebuild from the log
(`cairn recall reindex`) writes exactly what incremental indexing wrote.

When a slice `first..last` of a stream arrives, the indexer (re)indexes:

- the new messages with content, and the `neighbours_after` messages just before `first`,
  whose after-context the new messages extend;
- for each REDACTION record in the slice, the erased record is deleted from both indexes, and
  the `neighbours_after` messages before it and the `neighbours_before` messages after it
  (their context held the erased text) are indexed again without it.

Index entries are keyed by `index_key(tenant, stream_id)`: stream ids are unique within a
tenant only, and tenant names cannot contain "/", so the key is unique across tenants.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from recall_service.models import Record, RecordKind
from recall_service.projections.documents import (
    KEY_SEPARATOR,
    IndexedRecord,
    IndexedText,
    TextSettings,
    indexed_texts,
)


def index_key(tenant: str, stream_id: str) -> str:
    """The stream's key in the indexes: `tenant/stream_id`."""
    return f"{tenant}{KEY_SEPARATOR}{stream_id}"


def split_key(key: str) -> tuple[str, str]:
    """(tenant, stream_id) of an index key."""
    tenant, _, stream_id = key.partition(KEY_SEPARATOR)
    return tenant, stream_id


@dataclass(frozen=True, slots=True)
class Around:
    """The messages with content around an erased record, as the indexer read them: up to
    `before + after` on each side (the context of the records whose context held it)."""

    before: tuple[Record, ...]
    after: tuple[Record, ...]


@dataclass(frozen=True, slots=True)
class StreamSlice:
    """What the indexer read from one stream in one snapshot of the log.

    `new` are the records of seqs `first..last` (any kind; an erased record has content
    None). `before` are up to `before + after` messages with content below `first`. `around`
    holds, for each REDACTION record's target below `first`, the messages around it.
    `vectors` are client-supplied vectors by seq (float32 bytes), for every seq read.
    """

    tenant: str
    stream_id: str
    first: int
    last: int
    new: tuple[Record, ...]
    before: tuple[Record, ...] = ()
    around: Mapping[int, Around] = field(default_factory=dict)
    vectors: Mapping[int, bytes] = field(default_factory=dict)

    @property
    def key(self) -> str:
        """The stream's index key."""
        return index_key(self.tenant, self.stream_id)


@dataclass(slots=True)
class IndexBatch:
    """What to write to both indexes in one step.

    `window` holds every record whose text the targets' contexts need, `texts` their indexed
    texts (a text's `neighbours` are positions in `window`), `targets` the positions to
    write. `deletes` are seqs to remove per index key, `marks` each stream's new last
    applied seq.
    """

    window: list[IndexedRecord] = field(default_factory=list)
    texts: list[IndexedText] = field(default_factory=list)
    targets: list[int] = field(default_factory=list)
    deletes: dict[str, list[int]] = field(default_factory=dict)
    marks: dict[str, int] = field(default_factory=dict)

    def add(self, other: IndexBatch) -> None:
        """Appends another batch, shifting its positions past this one's window."""
        offset = len(self.window)
        self.window.extend(other.window)
        self.texts.extend(
            replace(t, neighbours=tuple(n + offset for n in t.neighbours)) for t in other.texts
        )
        self.targets.extend(i + offset for i in other.targets)
        for key, seqs in other.deletes.items():
            self.deletes.setdefault(key, []).extend(seqs)
        self.marks.update(other.marks)

    @property
    def records(self) -> list[IndexedRecord]:
        """The records to write, in target order."""
        return [self.window[i] for i in self.targets]


def indexed_record(tenant: str, record: Record, vector: bytes | None = None) -> IndexedRecord:
    """A log record as the projections take it. Its time is when it was said (epoch
    seconds): `occurred_at` when the writer gave it, else the server's time of the write."""
    return IndexedRecord(
        tenant=tenant,
        stream_id=index_key(tenant, record.stream_id),
        seq=record.seq,
        author=record.source_agent_id,
        created_at=record.said_at / 1_000_000,
        text=record.content or "",
        tags=record.tags,
        vector=None
        if vector is None
        else tuple(float(x) for x in np.frombuffer(vector, dtype="<f4")),
    )


def _has_text(record: Record) -> bool:
    return record.kind is RecordKind.MESSAGE and record.content is not None


def _region(
    tenant: str,
    records: Sequence[Record],
    targets: Sequence[int],
    vectors: Mapping[int, bytes],
    settings: TextSettings,
) -> IndexBatch:
    """A window of consecutive messages and the seqs in it to write."""
    window = [indexed_record(tenant, r, vectors.get(r.seq)) for r in records]
    wanted = set(targets)
    return IndexBatch(
        window=window,
        texts=indexed_texts(window, settings),
        targets=[i for i, r in enumerate(records) if r.seq in wanted],
    )


def plan_slice(piece: StreamSlice, settings: TextSettings) -> IndexBatch:
    """Everything one stream slice changes in the indexes (see the module docstring)."""
    after = settings.neighbours_after
    before_n = settings.neighbours_before
    messages = [r for r in piece.new if _has_text(r)]
    batch = IndexBatch(marks={piece.key: piece.last})
    if messages:
        extended = list(piece.before[-after:]) if after else []
        batch.add(
            _region(
                piece.tenant,
                [*piece.before, *messages],
                [r.seq for r in (*extended, *messages)],
                piece.vectors,
                settings,
            )
        )
    erased = [r.target_seq for r in piece.new if r.kind is RecordKind.REDACTION]
    if erased:
        batch.deletes[piece.key] = list(erased)
    for target in erased:
        near = piece.around.get(target)
        if near is None:  # erased inside this slice: it was never indexed with its text
            continue
        affected = [
            *(near.before[-after:] if after else ()),
            *near.after[:before_n],
        ]
        if affected:
            batch.add(
                _region(
                    piece.tenant,
                    [*near.before, *near.after],
                    [r.seq for r in affected],
                    piece.vectors,
                    settings,
                )
            )
    _drop_repeated_targets(batch)
    return batch


def _drop_repeated_targets(batch: IndexBatch) -> None:
    """Keeps the first target of each record (overlapping regions compute the same text)."""
    seen: set[tuple[str, int]] = set()
    kept = []
    for i in batch.targets:
        record = batch.window[i]
        identity = (record.stream_id, record.seq)
        if identity not in seen:
            seen.add(identity)
            kept.append(i)
    batch.targets = kept


def plan(slices: Sequence[StreamSlice], settings: TextSettings) -> IndexBatch:
    """One batch for several stream slices."""
    batch = IndexBatch()
    for piece in slices:
        batch.add(plan_slice(piece, settings))
    return batch


def window_sizes(settings: TextSettings) -> int:
    """How many messages the indexer reads on each side of a slice or an erased record."""
    return settings.neighbours_before + settings.neighbours_after
