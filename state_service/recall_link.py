"""The state service's link to the recall service: forwarding committed messages to each
agent's MESSAGES stream, and the memory tools that store in or search recall.

Forwarding is an outbox: CommitStep queues its messages in its own transaction; the
`Forwarder` sends them afterwards with the message id as idempotency key, retrying with
backoff while recall is unreachable and deleting them once acknowledged. A step never waits
for recall, and a retried send never writes a message twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import grpc

from cairn.v1 import recall_pb2, recall_pb2_grpc
from cairn_server.runner import Runner
from state_service.core import Deps
from state_service.models import Forward, Message

log = logging.getLogger("cairn.state.recall")

MAX_CONTENT_BYTES = 60_000
MAX_METADATA_BYTES = 15_000
BATCH = 200
TRANSIENT = frozenset(
    {
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        grpc.StatusCode.ABORTED,
        grpc.StatusCode.INTERNAL,
        grpc.StatusCode.UNKNOWN,
        grpc.StatusCode.CANCELLED,
    }
)


def messages_stream(agent_id: str) -> str:
    """The agent's MESSAGES stream id."""
    return f"messages-{agent_id}"


def archival_stream(agent_id: str) -> str:
    """The agent's ARCHIVAL stream id."""
    return f"archival-{agent_id}"


def _clip(text: str, limit: int) -> tuple[str, bool]:
    data = text.encode("utf-8")
    if len(data) <= limit:
        return text, False
    return data[:limit].decode("utf-8", errors="ignore"), True


def message_entry(message: Message) -> recall_pb2.WriteEntry:
    """A committed message as a recall record: its text as content (the calls it makes when
    it has no text), its role as a tag, and everything else in the metadata."""
    content = (
        message.content
        or "\n".join(f"[calls {call.name}({call.arguments_json})]" for call in message.tool_calls)
        or f"[empty {message.role.value} message]"
    )
    content, clipped = _clip(content, MAX_CONTENT_BYTES)
    metadata: dict[str, Any] = {
        "message_id": message.id,
        "step_id": message.step_id,
        "role": message.role.value,
        "created_at": message.created_at,
    }
    if message.name:
        metadata["name"] = message.name
    if message.tool_call_id:
        metadata["tool_call_id"] = message.tool_call_id
    if message.tool_calls:
        metadata["tool_calls"] = [
            {"id": c.id, "name": c.name, "arguments": c.arguments_json} for c in message.tool_calls
        ]
    if clipped:
        metadata["clipped"] = True
    text = json.dumps(metadata, ensure_ascii=False)
    if len(text.encode()) > MAX_METADATA_BYTES:
        for call in metadata.get("tool_calls", []):
            call["arguments"] = _clip(call["arguments"], 500)[0]
        metadata["clipped"] = True
        text = json.dumps(metadata, ensure_ascii=False)
    return recall_pb2.WriteEntry(
        source_agent_id=message.agent_id,
        content=content,
        tags=[f"role:{message.role.value}"],
        metadata_json=text,
        idempotency_key=message.id,
    )


@dataclass(frozen=True, slots=True)
class Found:
    """One record a search found."""

    seq: int
    content: str
    tags: tuple[str, ...]
    created_at: datetime
    metadata: dict[str, Any]


@dataclass(frozen=True, slots=True)
class SearchScope:
    """What to search one stream for: `tags_any` and the half-open [start, end) narrow it."""

    query: str
    top_k: int
    tags_any: tuple[str, ...] = ()
    start: datetime | None = None
    end: datetime | None = None


def _found(record: recall_pb2.Record) -> Found:
    try:
        metadata = json.loads(record.metadata_json) if record.metadata_json else {}
    except ValueError:
        metadata = {}
    return Found(
        seq=int(record.seq),
        content=record.content,
        tags=tuple(record.tags),
        created_at=record.created_at.ToDatetime(tzinfo=UTC),
        metadata=metadata if isinstance(metadata, dict) else {},
    )


class RecallError(Exception):
    """A recall call failed; `transient` failures are worth retrying."""

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(f"{code.name}: {details}")
        self.code = code
        self.details = details
        self.transient = code in TRANSIENT


@dataclass(frozen=True, slots=True)
class RecallCredentials:
    """Which tenants' agents the link serves, and the service key it uses for each.

    `open_tenant` is the tenant of a recall service that runs without keys
    (`--insecure-local`): the link serves it with no key.
    """

    keys: Mapping[str, str]
    open_tenant: str = ""

    def serves(self, tenant: str) -> bool:
        """True when the link can act in `tenant`."""
        return tenant in self.keys or tenant == self.open_tenant

    def metadata(self, tenant: str) -> tuple[tuple[str, str], ...]:
        """The call metadata for `tenant`."""
        key = self.keys.get(tenant)
        return (("authorization", f"Bearer {key}"),) if key else ()


class RecallLink:
    """Calls to the recall service on behalf of agents."""

    def __init__(
        self,
        address: str,
        credentials: RecallCredentials,
        *,
        timeout: float = 10.0,
        tls_roots: bytes | None = None,
        plaintext: bool = True,
    ) -> None:
        if plaintext:
            self._channel = grpc.aio.insecure_channel(address)
        else:
            self._channel = grpc.aio.secure_channel(
                address, grpc.ssl_channel_credentials(root_certificates=tls_roots)
            )
        self._stub = recall_pb2_grpc.RecallServiceStub(self._channel)
        self.credentials = credentials
        self._timeout = timeout
        self._streams: set[tuple[str, str]] = set()
        # The last seq this process wrote to each stream: a search waits for the indexes to
        # reach it, so an agent finds what it stored a moment ago.
        self._written: dict[tuple[str, str], int] = {}
        self._lexical_only = False

    async def close(self) -> None:
        """Closes the channel."""
        await self._channel.close()

    async def _call(self, method: str, request: Any, tenant: str) -> Any:
        try:
            return await getattr(self._stub, method)(
                request, metadata=self.credentials.metadata(tenant), timeout=self._timeout
            )
        except grpc.aio.AioRpcError as error:
            raise RecallError(error.code(), error.details() or "") from None

    async def ensure_stream(
        self, tenant: str, stream_id: str, kind: recall_pb2.StreamKind.ValueType, owner: str
    ) -> None:
        """Creates the stream unless it exists (remembered once seen)."""
        if (tenant, stream_id) in self._streams:
            return
        try:
            await self._call(
                "CreateStream",
                recall_pb2.CreateStreamRequest(
                    stream_id=stream_id, kind=kind, owner_agent_id=owner
                ),
                tenant,
            )
        except RecallError as error:
            if error.code is not grpc.StatusCode.ALREADY_EXISTS:
                raise
        self._streams.add((tenant, stream_id))

    async def forward(self, tenant: str, agent_id: str, messages: Sequence[Message]) -> None:
        """Appends messages to the agent's MESSAGES stream (idempotent per message)."""
        stream = messages_stream(agent_id)
        await self.ensure_stream(tenant, stream, recall_pb2.STREAM_KIND_MESSAGES, agent_id)
        reply = await self._call(
            "WriteBatch",
            recall_pb2.WriteBatchRequest(
                stream_id=stream, entries=[message_entry(m) for m in messages]
            ),
            tenant,
        )
        self._note_written(tenant, stream, max((r.seq for r in reply.records), default=0))

    async def archival_insert(
        self, tenant: str, agent_id: str, content: str, tags: Sequence[str], key: str
    ) -> int:
        """Stores a passage in the agent's ARCHIVAL stream; returns its seq."""
        stream = archival_stream(agent_id)
        await self.ensure_stream(tenant, stream, recall_pb2.STREAM_KIND_ARCHIVAL, agent_id)
        reply = await self._call(
            "Write",
            recall_pb2.WriteRequest(
                stream_id=stream,
                entry=recall_pb2.WriteEntry(
                    source_agent_id=agent_id,
                    content=content,
                    tags=list(tags),
                    idempotency_key=key,
                ),
            ),
            tenant,
        )
        self._note_written(tenant, stream, int(reply.record.seq))
        return int(reply.record.seq)

    def _note_written(self, tenant: str, stream: str, seq: int) -> None:
        if seq > self._written.get((tenant, stream), 0):
            self._written[(tenant, stream)] = seq

    async def search(self, tenant: str, stream: str, scope: SearchScope) -> list[Found]:
        """Searches one of the agent's streams, best first; a stream never written is empty.

        Hybrid search, unless the recall service takes query vectors from its clients (the
        state service has no embedder): then lexical, learned from the first refusal.
        """
        filter_ = recall_pb2.SearchFilter(tags_any=list(scope.tags_any))
        if scope.start is not None:
            filter_.time_range.start.FromDatetime(scope.start)
        if scope.end is not None:
            filter_.time_range.end.FromDatetime(scope.end)
        request = recall_pb2.SearchRequest(
            query=scope.query,
            stream_ids=[stream],
            mode=recall_pb2.SEARCH_MODE_LEXICAL
            if self._lexical_only
            else recall_pb2.SEARCH_MODE_HYBRID,
            filter=filter_,
            top_k=scope.top_k,
        )
        written = self._written.get((tenant, stream))
        if written:
            request.min_seq[stream] = written
        try:
            reply = await self._call("Search", request, tenant)
        except RecallError as error:
            if error.code is grpc.StatusCode.NOT_FOUND and written is None:
                return []
            if (
                error.code is not grpc.StatusCode.INVALID_ARGUMENT
                or not error.details.startswith("query_vector")
                or self._lexical_only
            ):
                raise
            self._lexical_only = True
            request.mode = recall_pb2.SEARCH_MODE_LEXICAL
            reply = await self._call("Search", request, tenant)
        return [_found(hit.record) for hit in reply.hits]


class Forwarder:
    """Drains the outbox into recall, oldest first, one agent's messages per batch."""

    def __init__(self, deps: Deps, runner: Runner, link: RecallLink) -> None:
        self._deps = deps
        self._runner = runner
        self._link = link
        self._wake = asyncio.Event()
        self._stopped = False
        self._delay = 0.0

    def wake(self) -> None:
        """Something was queued: forward without waiting for the next poll."""
        self._wake.set()

    def stop(self) -> None:
        """Ends the loop after the current round."""
        self._stopped = True
        self._wake.set()

    async def run(self) -> None:
        """Forwards until stopped."""
        while not self._stopped:
            try:
                progressed = await self.round()
            except Exception:
                log.exception("forwarding round failed")
                progressed = False
            if progressed:
                self._delay = 0.0
                continue
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=self._delay or 0.5)
            self._wake.clear()

    async def round(self) -> bool:
        """One pass over the oldest queued messages; True when something was forwarded."""
        reader = self._deps.store.reader()
        pending: list[Forward] = await self._runner.read(reader.pending_forwards, BATCH)
        if not pending:
            return False
        groups: dict[tuple[str, str], list[Forward]] = {}
        for item in pending:
            groups.setdefault((item.tenant, item.agent_id), []).append(item)
        done: list[int] = []
        for (tenant, agent_id), items in groups.items():
            try:
                await self._link.forward(tenant, agent_id, [i.message for i in items])
                done += [i.id for i in items]
            except RecallError as error:
                ids = [i.id for i in items]
                give_up = not error.transient
                await self._runner.write(self._failed, ids, str(error), give_up)
                if give_up:
                    log.error(
                        "recall refused forwarded messages; giving up on them",
                        extra={"agent_id": agent_id, "error": str(error), "messages": len(ids)},
                    )
                else:
                    self._delay = min(30.0, max(0.2, self._delay * 2)) * (1 + random.random() / 4)
                    log.warning(
                        "recall unreachable; will retry",
                        extra={"error": str(error), "retry_in_s": round(self._delay, 2)},
                    )
        if done:
            await self._runner.write(self._dropped, done)
        return bool(done)

    def _dropped(self, ids: list[int]) -> None:
        with self._deps.store.transaction() as tx:
            tx.drop_forwards(ids)

    def _failed(self, ids: list[int], error: str, give_up: bool) -> None:
        with self._deps.store.transaction() as tx:
            tx.note_forward_failure(ids, error, give_up, self._deps.clock())
