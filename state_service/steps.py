"""Steps: a completed turn's messages enter the window and history together, or not at all."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, replace

from cairn_server.auth import Principal
from cairn_server.errors import Aborted, AlreadyExists, InvalidArgument
from cairn_server.paging import fingerprint, next_token, parse_page
from state_service import access
from state_service.core import Deps, agent_not_found
from state_service.models import (
    Agent,
    AgentEvent,
    EventKind,
    MemoryMode,
    Message,
    Role,
    StepRecord,
)
from state_service.store.base import StateTx
from state_service.window import count_message

MAX_STEP_ID = 128
MAX_STEP_MESSAGES = 512
# System messages in a step carry what a harness showed the model mid-conversation, such as
# a memory update; summaries come only from compaction.
STEP_ROLES = frozenset({Role.SYSTEM, Role.USER, Role.ASSISTANT, Role.TOOL})


@dataclass(frozen=True, slots=True)
class StepResult:
    """What CommitStep returns."""

    messages: list[Message]
    context_version: int
    replayed: bool


def _check_messages(messages: Sequence[Message]) -> None:
    if not messages:
        raise InvalidArgument("messages", "a step needs at least one message")
    if len(messages) > MAX_STEP_MESSAGES:
        raise InvalidArgument(
            "messages", f"at most {MAX_STEP_MESSAGES} messages per step, got {len(messages)}"
        )
    for i, message in enumerate(messages):
        where = f"messages[{i}]"
        if message.role not in STEP_ROLES:
            raise InvalidArgument(
                f"{where}.role",
                f"a step holds system, user, assistant and tool messages, not {message.role.value}",
            )
        if message.role is Role.TOOL and not message.tool_call_id:
            raise InvalidArgument(f"{where}.tool_call_id", "a tool message must name its call")
        if message.tool_calls and message.role is not Role.ASSISTANT:
            raise InvalidArgument(f"{where}.tool_calls", "only assistant messages call tools")
        for j, call in enumerate(message.tool_calls):
            if not call.id or not call.name:
                raise InvalidArgument(
                    f"{where}.tool_calls[{j}]", "a tool call needs an id and a name"
                )


def _request_hash(messages: Sequence[Message], acknowledged: str) -> str:
    canonical = [
        [
            m.role.value,
            m.content,
            [[c.id, c.name, c.arguments_json] for c in m.tool_calls],
            m.tool_call_id,
            m.name,
        ]
        for m in messages
    ]
    text = json.dumps([canonical, acknowledged], separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


def _acknowledged(tx: StateTx, agent: Agent, value: str) -> int:
    """The memory counter a step acknowledges: a counter, or a MEMFS commit id."""
    if not value:
        return 0
    current = agent.memory_revision
    if agent.memory_mode is MemoryMode.MEMFS:
        counter = tx.revision_counter(agent.id, value)
        if counter is None:
            raise InvalidArgument(
                "acknowledged_memory_revision",
                f"{value!r} is not a memory revision of agent '{agent.id}'",
            )
        return counter
    try:
        revision = int(value)
    except ValueError:
        raise InvalidArgument(
            "acknowledged_memory_revision", f"must be a memory revision, got {value!r}"
        ) from None
    if not 1 <= revision <= current:
        raise InvalidArgument(
            "acknowledged_memory_revision",
            f"revision {revision} is not between 1 and the agent's current revision {current}",
        )
    return revision


def commit_step(
    deps: Deps,
    principal: Principal,
    agent_id: str,
    step_id: str,
    base_context_version: int,
    messages: Sequence[Message],
    acknowledged_revision: str = "",
) -> StepResult:
    """Appends the step's messages to the window and to history in one transaction."""
    access.require_agent_access(principal, agent_id, "commit steps of")
    if not 1 <= len(step_id) <= MAX_STEP_ID:
        raise InvalidArgument("step_id", f"must be 1-{MAX_STEP_ID} characters")
    _check_messages(messages)
    request_hash = _request_hash(messages, acknowledged_revision)
    now = deps.clock()
    with deps.store.transaction() as tx:
        agent = tx.get_agent_row(principal.tenant, agent_id)
        if agent is None:
            raise agent_not_found(agent_id)
        done = tx.get_step(agent_id, step_id)
        if done is not None:
            if done.request_hash != request_hash:
                raise AlreadyExists(
                    f"step '{step_id}' of agent '{agent_id}' was committed with different "
                    "messages; use a new step_id for a new step"
                )
            first = tx.get_messages(principal.tenant, done.message_ids)
            return StepResult(first, done.context_version, replayed=True)
        if base_context_version != agent.context_version:
            raise Aborted(
                f"agent '{agent_id}' window is at version {agent.context_version}, not the "
                f"base_context_version {base_context_version} this step was computed from; "
                "compile the context again"
            )
        acknowledged = _acknowledged(tx, agent, acknowledged_revision)
        stored = []
        for message in messages:
            fresh = replace(
                message,
                id=deps.new_id("message"),
                agent_id=agent_id,
                step_id=step_id,
                created_at=now,
            )
            stored.append(replace(fresh, tokens=count_message(deps.counter, fresh)))
        version = agent.context_version + 1
        tx.insert_messages(principal.tenant, stored, deps.counter.name)
        tx.append_window(agent_id, agent.window_size, [m.id for m in stored])
        tx.set_context(
            principal.tenant,
            agent_id,
            context_version=version,
            message_count=agent.message_count + len(stored),
            delivered_revision=max(agent.delivered_revision, acknowledged),
        )
        tx.insert_step(
            StepRecord(agent_id, step_id, request_hash, tuple(m.id for m in stored), version, now)
        )
        if deps.forwards is not None and deps.forwards(principal.tenant):
            # Forwarded to recall after the commit, never blocking it (recall_link.Forwarder).
            tx.enqueue_forwards(principal.tenant, agent_id, [m.id for m in stored])
        tx.emit(
            [
                AgentEvent(
                    kind=EventKind.MESSAGES_CHECKPOINTED,
                    tenant=principal.tenant,
                    agent_id=agent_id,
                    memory_revision=agent.revision,
                    context_version=version,
                    agent_version=agent.version,
                    time=now,
                    step_id=step_id,
                )
            ]
        )
    return StepResult(stored, version, replayed=False)


def list_messages(
    deps: Deps,
    principal: Principal,
    agent_id: str,
    *,
    page_size: int,
    page_token: str,
    roles: list[Role],
    start: float | None,
    end: float | None,
    newest_first: bool,
) -> tuple[list[Message], str]:
    """A page of the agent's whole history, and the next page's token."""
    access.require_agent_access(principal, agent_id, "read messages of")
    query = fingerprint("messages", agent_id, sorted(roles), start, end, newest_first)
    page = parse_page(page_size, page_token, query)
    reader = deps.store.reader()
    if reader.get_prompt_state(principal.tenant, agent_id) is None:
        raise agent_not_found(agent_id)
    rows = reader.list_messages(
        principal.tenant,
        agent_id,
        after=page.after,
        limit=page.size + 1,
        roles=[r.value for r in roles],
        start=start,
        end=end,
        newest_first=newest_first,
    )
    token = next_token([key for key, _ in rows], page, query)
    return [message for _, message in rows[: page.size]], token
