"""The state service's methods for a harness turn: compile the context, watch the agent,
commit a step, list its history, run memory tools, and compact the window.

Each function builds the call for the client method of the same name (`client.state.<name>`)
and its docstring documents that method; `timeout` as in `agent_calls`. `compile_context`,
`list_messages` and `commit_step` (whose step id makes it safe) are retried when the server
is unavailable; memory tools and compaction are sent once.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from cairn import state_convert as convert
from cairn.calls import DEFAULT_PAGE_SIZE, Call, Paged, Streamed, paged
from cairn.enums import ContextView, MessageRole
from cairn.protobuf_values import (
    CONTEXT_VIEW,
    MESSAGE_ROLE,
    json_text,
    to_timestamp,
)
from cairn.state_types import (
    AgentEvent,
    AppliedCompaction,
    CommittedStep,
    CompactionPlan,
    CompiledContext,
    MemoryToolResult,
    Message,
)
from cairn.v1 import common_pb2, state_pb2

# --- context and steps ----------------------------------------------------------------------


def compile_context(
    agent_id: str,
    *,
    force_recompile: bool = False,
    view: ContextView = ContextView.FULL,
    timeout: float | None = None,
) -> Call[CompiledContext]:
    """Returns the agent's context for its next model call: system prompt (the stored one
    when still current), in-context messages, tools and token account. `view=PROMPT` leaves
    out `compiled_memory`. Raises NotFound."""
    return Call(
        "state",
        "CompileContext",
        state_pb2.CompileContextRequest(
            agent_id=agent_id, force_recompile=force_recompile, view=CONTEXT_VIEW.encode(view)
        ),
        convert.compiled_context,
        idempotent=True,
        timeout=timeout,
    )


def watch_agent(agent_id: str, *, timeout: float | None = None) -> Streamed[AgentEvent]:
    """Iterates over the agent's events as they happen, starting with WATCH_STARTED, until
    you stop iterating (no deadline unless `timeout` is given). Raises NotFound (also when
    the agent is deleted) or ResourceExhausted (the watcher fell behind: watch again)."""
    return Streamed(
        "state",
        "WatchAgent",
        state_pb2.WatchAgentRequest(agent_id=agent_id),
        convert.agent_event,
        timeout=timeout,
    )


def commit_step(
    agent_id: str,
    messages: Sequence[Message],
    *,
    base_context_version: int,
    step_id: str | None = None,
    acknowledged_memory_revision: str = "",
    timeout: float | None = None,
) -> Call[CommittedStep]:
    """Appends a completed step's messages to the window, all or nothing, and returns them
    with their ids. `step_id` (generated when None) makes the call safe to retry: a step
    committed before returns its first result with `replayed` set. Raises InvalidArgument,
    NotFound, Aborted (`base_context_version` is stale) or AlreadyExists (the step id was
    committed with other messages)."""
    key = step_id if step_id is not None else f"step-{uuid.uuid4()}"
    return Call(
        "state",
        "CommitStep",
        state_pb2.CommitStepRequest(
            agent_id=agent_id,
            step_id=key,
            base_context_version=base_context_version,
            messages=[convert.message_pb(m) for m in messages],
            acknowledged_memory_revision=acknowledged_memory_revision,
        ),
        lambda r: CommittedStep(
            key, tuple(convert.message(m) for m in r.messages), r.context_version, r.replayed
        ),
        idempotent=True,
        timeout=timeout,
    )


def list_messages(
    agent_id: str,
    *,
    roles: Sequence[MessageRole] = (),
    start: datetime | None = None,
    end: datetime | None = None,
    newest_first: bool = False,
    page_size: int = DEFAULT_PAGE_SIZE,
    timeout: float | None = None,
) -> Paged[Message]:
    """Iterates over the agent's whole history (in context or not), oldest first unless
    `newest_first`, only `roles` when given, committed in [start, end) when given."""
    time_range = (
        common_pb2.TimeRange(
            start=to_timestamp(start) if start else None, end=to_timestamp(end) if end else None
        )
        if start or end
        else None
    )
    return paged(
        "state",
        "ListMessages",
        lambda token: state_pb2.ListMessagesRequest(
            agent_id=agent_id,
            page_size=page_size,
            page_token=token,
            roles=[MESSAGE_ROLE.encode(r) for r in roles],
            time_range=time_range,
            newest_first=newest_first,
        ),
        lambda r: [convert.message(m) for m in r.messages],
        timeout,
    )


def execute_memory_tool(
    agent_id: str,
    tool_name: str,
    arguments: str | Mapping[str, Any],
    *,
    timeout: float | None = None,
) -> Call[MemoryToolResult]:
    """Runs a memory tool call the model made; `arguments` is the model's JSON text (or a
    dict). A refused call is not an error: `ok` is False, `result` explains it to the model,
    and nothing changed. Raises NotFound (no such agent)."""
    text = arguments if isinstance(arguments, str) else json_text(arguments)
    return Call(
        "state",
        "ExecuteMemoryTool",
        state_pb2.ExecuteMemoryToolRequest(
            agent_id=agent_id, tool_name=tool_name, arguments_json=text
        ),
        convert.memory_tool_result,
        idempotent=False,
        timeout=timeout,
    )


# --- compaction -----------------------------------------------------------------------------


def plan_compaction(
    agent_id: str, *, target_share: float | None = None, timeout: float | None = None
) -> Call[CompactionPlan]:
    """Picks the oldest in-context messages to evict so the context falls below
    `target_share` of the window (server default 0.5) and returns them to summarise. Raises
    NotFound, InvalidArgument, or FailedPrecondition (below the target already, or no cut
    point)."""
    return Call(
        "state",
        "PlanCompaction",
        state_pb2.PlanCompactionRequest(agent_id=agent_id, target_share=target_share),
        lambda r: CompactionPlan(
            r.plan_id,
            tuple(convert.message(m) for m in r.messages),
            r.base_context_version,
            r.tokens_before,
            r.tokens_after,
        ),
        idempotent=False,
        timeout=timeout,
    )


def apply_compaction(
    agent_id: str, plan_id: str, summary: str, *, timeout: float | None = None
) -> Call[AppliedCompaction]:
    """Replaces the plan's messages with one summary message, atomically. Raises NotFound,
    InvalidArgument (empty summary), Aborted (the window moved since the plan) or
    FailedPrecondition (applied already)."""
    return Call(
        "state",
        "ApplyCompaction",
        state_pb2.ApplyCompactionRequest(agent_id=agent_id, plan_id=plan_id, summary=summary),
        lambda r: AppliedCompaction(
            convert.message(r.summary_message), r.context_version, convert.tokens(r.tokens)
        ),
        idempotent=False,
        timeout=timeout,
    )
