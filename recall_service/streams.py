"""Creating, fetching and listing streams."""

from __future__ import annotations

from cairn_server.auth import Principal
from cairn_server.errors import PermissionDenied
from cairn_server.paging import fingerprint, next_token, parse_page
from recall_service import acl, validation
from recall_service.append import append_drafts
from recall_service.canonical import genesis
from recall_service.core import Deps, load_stream
from recall_service.merkle import EMPTY_ROOT
from recall_service.models import (
    Checkpoint,
    Draft,
    Participant,
    Record,
    RecordKind,
    Role,
    Stream,
    StreamKind,
)


def create_stream(
    deps: Deps, principal: Principal, stream_id: str, kind: StreamKind, owner_agent_id: str
) -> tuple[Stream, Record | None, Checkpoint]:
    """Creates a stream; with an owner, its first record attaches the owner as OWNER.

    Agent keys own what they create: `owner_agent_id` defaults to, and may only name, the
    agent itself.
    """
    if stream_id:
        validation.check_id("stream_id", stream_id, "a stream")
    else:
        stream_id = deps.new_stream_id()
    agent = acl.agent_of(principal)
    if agent is not None:
        if owner_agent_id and owner_agent_id != agent:
            raise PermissionDenied(
                f"{principal.describe()} may not create a stream owned by '{owner_agent_id}': "
                "an agent key creates streams it owns itself"
            )
        owner_agent_id = agent
    elif owner_agent_id:
        validation.check_id("owner_agent_id", owner_agent_id, "an agent")
    with deps.store.transaction() as tx:
        # The insert is the check: it raises AlreadyExists for an id taken before, or by a
        # concurrent create on another replica that committed first.
        now = deps.clock()
        first = genesis(principal.tenant, stream_id, kind, now)
        stream = tx.insert_stream(
            Stream(
                key=0,
                tenant=principal.tenant,
                id=stream_id,
                kind=kind,
                created_by=acl.written_by(principal),
                created_at=now,
                genesis=first,
                size=0,
                head=first,
                root=EMPTY_ROOT,
                last_time=now,
            )
        )
        drafts = []
        if owner_agent_id:
            drafts.append(
                Draft(
                    kind=RecordKind.ATTACH,
                    source_agent_id=agent or "",
                    written_by=acl.written_by(principal),
                    content="",
                    subject_agent_id=owner_agent_id,
                    role=Role.OWNER,
                )
            )
        stream, records, checkpoint = append_drafts(deps, tx, stream, drafts)
        if records:
            tx.set_participant(
                stream, Participant(owner_agent_id, Role.OWNER, 1, records[0].created_at)
            )
    return stream, (records[0] if records else None), checkpoint


def get_stream(deps: Deps, principal: Principal, stream_id: str) -> Stream:
    """A stream the caller may read."""
    reader = deps.store.reader()
    stream = load_stream(reader, principal.tenant, stream_id)
    agent = acl.agent_of(principal)
    own = reader.participant(stream, agent) if agent else None
    acl.require_read(principal, stream, own)
    return stream


def list_streams(
    deps: Deps, principal: Principal, *, page_size: int, page_token: str, kind: StreamKind | None
) -> tuple[list[Stream], str]:
    """A page of streams in creation order: an agent's own, or all of the tenant's."""
    agent = acl.agent_of(principal)
    query = fingerprint("streams", None if kind is None else int(kind))
    page = parse_page(page_size, page_token, query)
    rows = deps.store.reader().list_streams(
        principal.tenant, after=page.after, limit=page.size + 1, kind=kind, agent=agent
    )
    token = next_token([key for key, _ in rows], page, query)
    return [stream for _, stream in rows[: page.size]], token
