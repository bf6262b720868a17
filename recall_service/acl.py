"""Who may do what to a stream (DESIGN.md §4.1). Pure rules over a principal and its
participant row; the callers look the rows up.

- An `agent` key is the participant named by its subject. It reads while attached with any
  role, writes as itself as a WRITER or OWNER, and writes as another participant, attaches,
  detaches and redacts as an OWNER.
- An `admin` key (tenant admin) may do everything on every stream of its tenant.
- A `service` key (a trusted backend such as the state service) creates streams, reads
  every stream of its tenant and writes as any participant that is a current WRITER or
  OWNER; it does not attach, detach or redact.
- A record's `source_agent_id` is always a current WRITER or OWNER: nobody writes as a
  reader, a detached agent or a stranger.
"""

from __future__ import annotations

from cairn_server.auth import Principal, Role
from cairn_server.errors import InvalidArgument, PermissionDenied
from recall_service.models import Participant, Stream
from recall_service.models import Role as ParticipantRole


def written_by(principal: Principal) -> str:
    """How a record names the principal that wrote it: `<role>:<subject>`."""
    return f"{principal.role.value}:{principal.subject}"


def agent_of(principal: Principal) -> str | None:
    """The participant an agent key is; None for admin and service keys."""
    return principal.subject if principal.role is Role.AGENT else None


def _why_not(participant: Participant | None) -> str:
    if participant is None:
        return "it is not a participant"
    if not participant.active:
        return f"it was detached at seq {participant.detached_seq}"
    return f"it is a {participant.role.name}"


def _denied(principal: Principal, action: str, stream: Stream, why: str) -> PermissionDenied:
    return PermissionDenied(f"{principal.describe()} may not {action} stream '{stream.id}': {why}")


def require_read(principal: Principal, stream: Stream, own: Participant | None) -> None:
    """Admin and service keys read everything; agents read while attached."""
    if principal.role is not Role.AGENT:
        return
    if own is None or not own.active:
        raise _denied(principal, "read", stream, _why_not(own))


def require_manage(
    principal: Principal, stream: Stream, own: Participant | None, action: str
) -> None:
    """Attach, detach and redact: an OWNER or the tenant admin."""
    if principal.role is Role.ADMIN:
        return
    if principal.role is Role.SERVICE:
        raise _denied(
            principal, action, stream, "service keys write but do not manage participants"
        )
    if own is None or not own.active or own.role is not ParticipantRole.OWNER:
        raise _denied(principal, action, stream, f"{_why_not(own)}; it needs OWNER")


def source_of(principal: Principal, requested: str, field: str) -> str:
    """The author a write speaks for: the agent itself by default; admin and service keys
    must name one."""
    if requested:
        return requested
    agent = agent_of(principal)
    if agent is None:
        raise InvalidArgument(
            field,
            f"is required for {principal.role.value} keys, which speak for no agent of their "
            "own: name the participant the record speaks for",
        )
    return agent


def require_write(
    principal: Principal,
    stream: Stream,
    own: Participant | None,
    source_id: str,
    source: Participant | None,
) -> None:
    """Writing as `source_id`: the source must be a current WRITER or OWNER, and the caller
    must be that source, an OWNER, the tenant admin or a service key."""
    agent = agent_of(principal)
    if agent is not None:
        if own is None or not own.active or own.role < ParticipantRole.WRITER:
            raise _denied(principal, "write to", stream, f"{_why_not(own)}; it needs WRITER")
        if source_id != agent and own.role is not ParticipantRole.OWNER:
            raise _denied(
                principal,
                f"write as '{source_id}' to",
                stream,
                f"it is a {own.role.name}; writing as another participant needs OWNER",
            )
    if source is None or not source.active or source.role < ParticipantRole.WRITER:
        why = _why_not(source).replace("it ", f"'{source_id}' ", 1)
        raise _denied(principal, f"write as '{source_id}' to", stream, f"{why}; it needs WRITER")
