"""Letta-style shared conversations on a Cairn recall stream.

    client = cairn.Client(recall="127.0.0.1:50052", api_key=key)
    shared = LettaShared.create(client, owner_agent_id="planner")
    shared.attach("coder")                       # a WRITER by default
    shared.write("Plan: ship on Friday.")        # as the key's own agent
    shared.read(from_agent="coder", limit=20)    # the latest 20 messages by coder, oldest first
    shared.read(query="release date", limit=5)   # the 5 messages most about it, best first
    shared.overlapping_writes_within(seconds=5)  # messages by different agents close together

Every call is one or a few RecallService RPCs made through `cairn.Client` (a bare
`grpc.Channel` with an `api_key` works too), with its deadline and retries; errors are the
client's typed errors (`cairn.PermissionDenied` for a detached agent, and so on). `read`
returns messages only, never the attach and detach events of the log. `read(query=...)`
searches the conversation through the recall service's `Search` (BM25 and vectors fused);
it sees every message this object wrote (it passes the last seq it wrote as `min_seq`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from itertools import islice
from typing import Any

import grpc

from cairn.client import DEFAULT_TIMEOUT, Client
from cairn.enums import ParticipantRole, StreamKind
from cairn.recall_types import Participant, Record

__all__ = ["LettaShared", "Overlap", "SharedMessage", "SharedParticipant"]

_ROLES = ("reader", "writer", "owner")


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


def _message(record: Record) -> SharedMessage:
    return SharedMessage(
        seq=record.seq,
        author=record.source_agent_id,
        written_by=record.written_by,
        content=record.content,
        created_at=record.created_at,
        tags=record.tags,
        metadata=record.metadata,
        redacted=record.redacted,
    )


def _participant(participant: Participant) -> SharedParticipant:
    return SharedParticipant(
        agent_id=participant.agent_id,
        role=str(participant.role),
        attached_seq=participant.attached_seq,
        attached_at=participant.attached_at,
    )


def _client(target: Client | grpc.Channel, api_key: str | None, timeout: float | None) -> Client:
    if isinstance(target, Client):
        if api_key is not None:
            raise ValueError("the client carries its own API key: pass api_key to cairn.Client")
        return target
    return Client.from_channels(recall=target, api_key=api_key, timeout=timeout)


class LettaShared:
    """A shared conversation: one CONVERSATION stream of the recall service."""

    def __init__(
        self,
        client: Client | grpc.Channel,
        stream_id: str,
        *,
        api_key: str | None = None,
        timeout: float | None = DEFAULT_TIMEOUT,
    ) -> None:
        """`client` reaches the recall service; a `grpc.Channel` is wrapped in a
        `cairn.Client` with `api_key` and `timeout` (a Client brings its own)."""
        self.client = _client(client, api_key, timeout)
        self.stream_id = stream_id
        self._last_written = 0  # the last seq this object wrote: what a search must see

    @classmethod
    def create(
        cls,
        client: Client | grpc.Channel,
        *,
        api_key: str | None = None,
        stream_id: str = "",
        owner_agent_id: str = "",
        timeout: float | None = DEFAULT_TIMEOUT,
    ) -> LettaShared:
        """Creates a new conversation (an agent key owns it; admin and service keys name the
        owner) and returns it."""
        recall = _client(client, api_key, timeout)
        created = recall.recall.create_stream(
            StreamKind.CONVERSATION, stream_id=stream_id, owner_agent_id=owner_agent_id
        )
        return cls(recall, created.stream.id)

    def attach(self, agent_id: str, role: str = "writer") -> SharedParticipant:
        """Adds an agent (or changes its role); needs an owner or admin key."""
        if role not in _ROLES:
            raise ValueError(f"role must be one of {', '.join(_ROLES)}, got {role!r}")
        attached = self.client.recall.attach(self.stream_id, agent_id, ParticipantRole(role))
        return _participant(attached.participant)

    def detach(self, agent_id: str) -> None:
        """Removes an agent: it reads and writes nothing more."""
        self.client.recall.detach(self.stream_id, agent_id)

    def read(
        self, *, from_agent: str | None = None, query: str | None = None, limit: int = 50
    ) -> list[SharedMessage]:
        """The latest `limit` messages (1-1000), oldest first, optionally only one agent's.

        With `query`: the `limit` (1-100) messages that best match it, best first, found by
        the recall service's search, seeing at least every message this object wrote."""
        if query is not None:
            if not 1 <= limit <= 100:
                raise ValueError(f"limit must be between 1 and 100 with a query, got {limit}")
            hits = self.client.recall.search(
                query,
                stream_ids=[self.stream_id],
                source_agent_ids=[from_agent] if from_agent else [],
                min_seq={self.stream_id: self._last_written} if self._last_written else None,
                top_k=limit,
            )
            return [_message(h.record) for h in hits]
        if not 1 <= limit <= 1000:
            raise ValueError(f"limit must be between 1 and 1000, got {limit}")
        newest = self.client.recall.read(
            self.stream_id,
            source_agent_ids=[from_agent] if from_agent else [],
            newest_first=True,
            page_size=limit,
        )
        return [_message(r) for r in reversed(list(islice(newest, limit)))]

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
        owner, admin or service key). Retrying with the same `idempotency_key` writes once,
        and with a key the client retries by itself when the server is unavailable."""
        written = self.client.recall.write(
            self.stream_id,
            content,
            source_agent_id=source_agent_id or "",
            tags=tags,
            metadata=metadata,
            idempotency_key=idempotency_key,
        )
        self._last_written = max(self._last_written, written.record.seq)
        return _message(written.record)

    def list_participants(self) -> list[SharedParticipant]:
        """Everyone attached now, in the order they joined."""
        participants = self.client.recall.list_participants(self.stream_id, page_size=1000)
        return [_participant(p) for p in participants]

    def overlapping_writes_within(self, *, seconds: float) -> list[Overlap]:
        """Pairs of messages by different agents written within `seconds` of each other."""
        pairs = self.client.recall.overlapping_writes(self.stream_id, seconds, page_size=1000)
        return [Overlap(_message(p.earlier), _message(p.later), p.seconds_apart) for p in pairs]
