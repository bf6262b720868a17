"""Erasing a message's content: a REDACTION record, and the content and salt removed.

The erased record keeps its content_hash, so its leaf, the chain and the Merkle tree still
verify; without the salt nobody can test a guess of the content against the hash.
"""

from __future__ import annotations

from cairn_server.auth import Principal
from cairn_server.errors import FailedPrecondition, InvalidArgument
from recall_service import acl, validation
from recall_service.append import append_drafts
from recall_service.core import Deps, stream_not_found
from recall_service.models import Checkpoint, Draft, Record, RecordKind


def redact(
    deps: Deps, principal: Principal, stream_id: str, seq: int, reason: str
) -> tuple[Record, Checkpoint]:
    """Appends a REDACTION record for `seq` and erases that record's content and salt."""
    validation.check_reason("reason", reason)
    with deps.store.append(principal.tenant, stream_id) as (tx, stream):
        if stream is None:
            raise stream_not_found(stream_id)
        caller = acl.agent_of(principal)
        acl.require_manage(
            principal, stream, tx.participant(stream, caller) if caller else None, "redact"
        )
        if not 1 <= seq <= stream.size:
            raise InvalidArgument(
                "seq", f"must be between 1 and the stream's size {stream.size}, got {seq}"
            )
        target = tx.record(stream, seq)
        assert target is not None, "seqs are gap-free"
        if target.kind is not RecordKind.MESSAGE:
            raise FailedPrecondition(
                f"only MESSAGE records can be redacted; record {seq} is of kind {target.kind.name}"
            )
        if target.redacted:
            raise FailedPrecondition(
                f"record {seq} is redacted already (by record {target.redacted_by})"
            )
        draft = Draft(
            kind=RecordKind.REDACTION,
            source_agent_id=caller or "",
            written_by=acl.written_by(principal),
            content=reason,
            target_seq=seq,
        )
        _, records, checkpoint = append_drafts(deps, tx, stream, [draft])
        tx.erase_content(stream, seq)
    deps.store.purge_erased()
    return records[0], checkpoint
