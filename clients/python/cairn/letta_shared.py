"""Letta-style shared conversations on a Cairn recall stream.

    shared = LettaShared.create(channel, api_key=key, owner_agent_id="planner")
    shared.attach("coder")                       # a WRITER by default
    shared.write("Plan: ship on Friday.")        # as the key's own agent
    shared.read(from_agent="coder", limit=20)    # the latest 20 messages by coder, oldest first
    shared.overlapping_writes_within(seconds=5)  # messages by different agents close together

Every call is one or a few RecallService RPCs; errors are the server's `grpc.RpcError`s
(`PERMISSION_DENIED` for a detached agent, and so on). `read` returns messages only, never
the attach and detach events of the log. Search arrives in a later release: until then
`read(query=...)` raises `SearchNotAvailable`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import grpc
from google.protobuf.timestamp_pb2 import Timestamp

from cairn.connection import Authenticated
from cairn.v1 import recall_pb2, recall_pb2_grpc

__all__ = ["LettaShared", "Overlap", "SearchNotAvailable", "SharedMessage", "SharedParticipant"]

_ROLES = {
    "reader": recall_pb2.PARTICIPANT_ROLE_READER,
    "writer": recall_pb2.PARTICIPANT_ROLE_WRITER,
    "owner": recall_pb2.PARTICIPANT_ROLE_OWNER,
}
_ROLE_NAMES = {number: name for name, number in _ROLES.items()}


class SearchNotAvailable(NotImplementedError):
    """`read(query=...)` needs the recall service's search, which is not available yet."""


@dataclass(frozen=True, slots=True)
class SharedMessage:
    """One message of the conversation."""

    seq: int
    author: str
    written_by: str
    content: str
    created_at: datetime
    tags: tuple[str, ...] = ()
    metadata: dict[str, Any] = field(default_factory=dict)
    redacted: bool = False


@dataclass(frozen=True, slots=True)
class SharedParticipant:
    """An agent taking part, with its role (`reader`, `writer` or `owner`)."""

    agent_id: str
    role: str
    attached_seq: int
    attached_at: datetime


@dataclass(frozen=True, slots=True)
class Overlap:
    """Two messages by different agents written `seconds_apart` from each other."""

    earlier: SharedMessage
    later: SharedMessage
    seconds_apart: float


def _time(ts: Timestamp) -> datetime:
    return datetime.fromtimestamp(ts.seconds + ts.nanos / 1e9, tz=UTC)


def _message(record: recall_pb2.Record) -> SharedMessage:
    return SharedMessage(
        seq=record.seq,
        author=record.source_agent_id,
        written_by=record.written_by,
        content=record.content,
        created_at=_time(record.created_at),
        tags=tuple(record.tags),
        metadata=json.loads(record.metadata_json or "{}"),
        redacted=record.redacted,
    )


def _participant(pb: recall_pb2.Participant) -> SharedParticipant:
    return SharedParticipant(
        agent_id=pb.agent_id,
        role=_ROLE_NAMES.get(pb.role, "unknown"),
        attached_seq=pb.attached_seq,
        attached_at=_time(pb.attached_at),
    )


class LettaShared:
    """A shared conversation: one CONVERSATION stream of the recall service."""

    def __init__(
        self,
        channel: grpc.Channel,
        stream_id: str,
        *,
        api_key: str | None = None,
        timeout: float = 30.0,
    ) -> None:
        self._stub: Any = Authenticated(
            recall_pb2_grpc.RecallServiceStub(channel), api_key, timeout
        )
        self.stream_id = stream_id

    @classmethod
    def create(
        cls,
        channel: grpc.Channel,
        *,
        api_key: str | None = None,
        stream_id: str = "",
        owner_agent_id: str = "",
        timeout: float = 30.0,
    ) -> LettaShared:
        """Creates a new conversation (an agent key owns it; admin and service keys name the
        owner) and returns it."""
        stub: Any = Authenticated(recall_pb2_grpc.RecallServiceStub(channel), api_key, timeout)
        reply = stub.CreateStream(
            recall_pb2.CreateStreamRequest(
                stream_id=stream_id,
                kind=recall_pb2.STREAM_KIND_CONVERSATION,
                owner_agent_id=owner_agent_id,
            )
        )
        return cls(channel, reply.stream.id, api_key=api_key, timeout=timeout)

    def attach(self, agent_id: str, role: str = "writer") -> SharedParticipant:
        """Adds an agent (or changes its role); needs an owner or admin key."""
        if role not in _ROLES:
            raise ValueError(f"role must be one of {', '.join(_ROLES)}, got {role!r}")
        reply = self._stub.Attach(
            recall_pb2.AttachRequest(stream_id=self.stream_id, agent_id=agent_id, role=_ROLES[role])
        )
        return _participant(reply.participant)

    def detach(self, agent_id: str) -> None:
        """Removes an agent: it reads and writes nothing more."""
        self._stub.Detach(recall_pb2.DetachRequest(stream_id=self.stream_id, agent_id=agent_id))

    def read(
        self, *, from_agent: str | None = None, query: str | None = None, limit: int = 50
    ) -> list[SharedMessage]:
        """The latest `limit` messages (1-1000), oldest first, optionally only one agent's."""
        if query is not None:
            raise SearchNotAvailable(
                "read(query=...) needs the recall service's search, which is not available "
                "in this release; read by author and limit instead"
            )
        reply = self._stub.Read(
            recall_pb2.ReadRequest(
                stream_id=self.stream_id,
                page_size=limit,
                source_agent_ids=[from_agent] if from_agent else [],
                newest_first=True,
            )
        )
        return [_message(r) for r in reversed(reply.records)]

    def write(
        self,
        content: str,
        *,
        source_agent_id: str | None = None,
        tags: Sequence[str] = (),
        metadata: dict[str, Any] | None = None,
        idempotency_key: str = "",
    ) -> SharedMessage:
        """Appends a message as the key's own agent, or as `source_agent_id` (which needs an
        owner, admin or service key). Retrying with the same `idempotency_key` writes once."""
        reply = self._stub.Write(
            recall_pb2.WriteRequest(
                stream_id=self.stream_id,
                entry=recall_pb2.WriteEntry(
                    content=content,
                    source_agent_id=source_agent_id or "",
                    tags=list(tags),
                    metadata_json=json.dumps(metadata) if metadata is not None else "",
                    idempotency_key=idempotency_key,
                ),
            )
        )
        return _message(reply.record)

    def list_participants(self) -> list[SharedParticipant]:
        """Everyone attached now, in the order they joined."""
        found: list[SharedParticipant] = []
        token = ""
        while True:
            reply = self._stub.ListParticipants(
                recall_pb2.ListParticipantsRequest(
                    stream_id=self.stream_id, page_size=1000, page_token=token
                )
            )
            found.extend(_participant(p) for p in reply.participants)
            token = reply.next_page_token
            if not token:
                return found

    def overlapping_writes_within(self, *, seconds: float) -> list[Overlap]:
        """Pairs of messages by different agents written within `seconds` of each other."""
        found: list[Overlap] = []
        token = ""
        while True:
            reply = self._stub.OverlappingWrites(
                recall_pb2.OverlappingWritesRequest(
                    stream_id=self.stream_id,
                    within_seconds=seconds,
                    page_size=1000,
                    page_token=token,
                )
            )
            found.extend(
                Overlap(_message(p.earlier), _message(p.later), p.seconds_apart)
                for p in reply.pairs
            )
            token = reply.next_page_token
            if not token:
                return found
