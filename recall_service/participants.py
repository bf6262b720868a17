"""Attaching and detaching agents (log records themselves), and replaying who took part."""

from __future__ import annotations

from collections.abc import Iterable

from cairn_server.auth import Principal
from cairn_server.errors import InvalidArgument, NotFound
from cairn_server.paging import fingerprint, next_token, parse_page
from recall_service import acl, validation
from recall_service.append import append_drafts
from recall_service.core import Deps, load_stream, stream_not_found
from recall_service.models import Checkpoint, Draft, Participant, Record, RecordKind, Role


def _event(principal: Principal, kind: RecordKind, agent_id: str, role: Role) -> Draft:
    return Draft(
        kind=kind,
        source_agent_id=acl.agent_of(principal) or "",
        written_by=acl.written_by(principal),
        content="",
        subject_agent_id=agent_id,
        role=role,
    )


def attach(
    deps: Deps, principal: Principal, stream_id: str, agent_id: str, role: Role
) -> tuple[Participant, Record | None, Checkpoint | None]:
    """Attaches `agent_id` with `role` (or changes its role) by appending an ATTACH record.

    An agent that holds the role already is returned as is, and nothing is written.
    """
    validation.check_id("agent_id", agent_id, "an agent")
    with deps.store.append(principal.tenant, stream_id) as (tx, stream):
        if stream is None:
            raise stream_not_found(stream_id)
        caller = acl.agent_of(principal)
        found = tx.participants(stream, [a for a in (caller, agent_id) if a])
        acl.require_manage(principal, stream, found.get(caller or ""), "attach agents to")
        current = found.get(agent_id)
        if current is not None and current.active and current.role is role:
            return current, None, None
        _, records, checkpoint = append_drafts(
            deps, tx, stream, [_event(principal, RecordKind.ATTACH, agent_id, role)]
        )
        record = records[0]
        participant = Participant(agent_id, role, record.seq, record.created_at)
        tx.set_participant(stream, participant)
    return participant, record, checkpoint


def detach(
    deps: Deps, principal: Principal, stream_id: str, agent_id: str
) -> tuple[Record, Checkpoint]:
    """Detaches `agent_id` by appending a DETACH record; it reads and writes nothing more."""
    validation.check_id("agent_id", agent_id, "an agent")
    with deps.store.append(principal.tenant, stream_id) as (tx, stream):
        if stream is None:
            raise stream_not_found(stream_id)
        caller = acl.agent_of(principal)
        found = tx.participants(stream, [a for a in (caller, agent_id) if a])
        acl.require_manage(principal, stream, found.get(caller or ""), "detach agents from")
        current = found.get(agent_id)
        if current is None or not current.active:
            raise NotFound(f"agent '{agent_id}' is not a participant of stream '{stream.id}'")
        _, records, checkpoint = append_drafts(
            deps, tx, stream, [_event(principal, RecordKind.DETACH, agent_id, Role.NONE)]
        )
        record = records[0]
        tx.set_participant(
            stream,
            Participant(
                agent_id, current.role, current.attached_seq, current.attached_at, record.seq
            ),
        )
    return record, checkpoint


def replay(events: Iterable[Record]) -> list[tuple[int, Participant]]:
    """The participants after `events` (ATTACH and DETACH records in log order), each with
    the seq its current membership began, ordered by that seq."""
    joined: dict[str, int] = {}
    current: dict[str, Participant] = {}
    for record in events:
        agent = record.subject_agent_id
        if record.kind is RecordKind.ATTACH:
            joined.setdefault(agent, record.seq)
            current[agent] = Participant(agent, record.role, record.seq, record.created_at)
        elif record.kind is RecordKind.DETACH:
            joined.pop(agent, None)
            current.pop(agent, None)
    return sorted(((joined[a], p) for a, p in current.items()), key=lambda pair: pair[0])


def list_participants(
    deps: Deps,
    principal: Principal,
    stream_id: str,
    *,
    at_seq: int,
    page_size: int,
    page_token: str,
) -> tuple[list[Participant], str]:
    """The participants now, or right after record `at_seq`, replayed from the log."""
    reader = deps.store.reader()
    stream = load_stream(reader, principal.tenant, stream_id)
    agent = acl.agent_of(principal)
    acl.require_read(principal, stream, reader.participant(stream, agent) if agent else None)
    if not 0 <= at_seq <= stream.size:
        raise InvalidArgument(
            "at_seq", f"must be between 0 and the stream's size {stream.size}, got {at_seq}"
        )
    query = fingerprint("participants", stream.id, at_seq)
    page = parse_page(page_size, page_token, query)
    rows = [
        (joined, p)
        for joined, p in replay(reader.membership_events(stream, at_seq or stream.size))
        if joined > page.after
    ][: page.size + 1]
    token = next_token([joined for joined, _ in rows], page, query)
    return [p for _, p in rows[: page.size]], token
