"""Appending to a stream: seal drafts into records, grow the Merkle tree, sign a checkpoint.

Runs inside the store's `append` unit of work, which holds the stream's append lock, so the
stream's head read at its start is still the head when the records are inserted. The stream
row carries the tree's frontier (its peaks), so an append reads no Merkle nodes at all.
"""

from __future__ import annotations

from collections.abc import Sequence

from recall_service import merkle
from recall_service.canonical import seal
from recall_service.core import Deps
from recall_service.models import Checkpoint, Draft, Record, Stream
from recall_service.store.base import LogTx, StreamHead


def append_drafts(
    deps: Deps, tx: LogTx, stream: Stream, drafts: Sequence[Draft]
) -> tuple[Stream, list[Record], Checkpoint]:
    """Appends `drafts` in order at seqs size+1, size+2, …; returns the stream as it is now,
    the new records and the signed checkpoint of the new size.

    Times never go backwards along a stream: a record's time is at least its predecessor's.
    """
    now = max(deps.clock(), stream.last_time)
    previous = stream.head
    records: list[Record] = []
    for offset, draft in enumerate(drafts, start=1):
        record = seal(draft, stream.id, stream.size + offset, now, deps.salt(), previous)
        previous = record.chain_hash
        records.append(record)
    peaks, size, nodes = merkle.append(stream.frontier, stream.size, [r.leaf_hash for r in records])
    root = merkle.root_of_peaks(peaks)
    checkpoint = deps.signer.checkpoint(stream.tenant, stream.id, size, root, previous, now)
    head = StreamHead(size, previous, root, now, tuple(peaks))
    stream = tx.append(stream, records, nodes, head, checkpoint)
    return stream, records, checkpoint
