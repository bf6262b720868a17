"""Two-phase compaction: plan which messages to evict, then swap them for a summary.

`choose_cut` is the pure sliding-window rule; `plan_compaction` and `apply_compaction` run it
against the store. Any model can write the summary between the two phases.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from cairn_server.auth import Principal
from cairn_server.errors import Aborted, FailedPrecondition, InvalidArgument, NotFound
from state_service import access
from state_service.context import ContextSettings, TokenAccount, compile_context
from state_service.core import Deps, agent_not_found
from state_service.models import (
    AgentEvent,
    CompactionPlan,
    EventKind,
    Message,
    Role,
)
from state_service.prompts import rebuild_events
from state_service.window import count_message

DEFAULT_TARGET_SHARE = 0.5


def valid_cuts(messages: Sequence[Message]) -> list[int]:
    """Indices i such that evicting messages[0..i] leaves a well-formed window: message i is
    an assistant message without tool calls, and message i+1 does not answer a tool call."""
    cuts = []
    for i, message in enumerate(messages):
        if message.role is not Role.ASSISTANT or message.tool_calls:
            continue
        following = messages[i + 1] if i + 1 < len(messages) else None
        if following is not None and following.role is Role.TOOL:
            continue
        cuts.append(i)
    return cuts


def choose_cut(messages: Sequence[Message], must_free: int) -> int | None:
    """The smallest valid cut that frees at least `must_free` tokens, else the largest valid
    cut; None when no valid cut exists. Returns the index of the last evicted message."""
    cuts = valid_cuts(messages)
    if not cuts:
        return None
    freed = 0
    position = 0
    for cut in cuts:
        while position <= cut:
            freed += messages[position].tokens
            position += 1
        if freed >= must_free:
            return cut
    return cuts[-1]


@dataclass(frozen=True, slots=True)
class Plan:
    """What PlanCompaction returns."""

    plan: CompactionPlan
    messages: list[Message]
    tokens_before: int
    tokens_after: int


def plan_compaction(
    deps: Deps,
    principal: Principal,
    agent_id: str,
    target_share: float | None,
    settings: ContextSettings,
) -> Plan:
    """Chooses the oldest messages to evict so the context falls below the target share."""
    share = DEFAULT_TARGET_SHARE if target_share is None else target_share
    if not 0 < share < 1:
        raise InvalidArgument("target_share", f"must be between 0 and 1, got {share}")
    access.require_agent_access(principal, agent_id, "compact")
    context = compile_context(deps, principal, agent_id, settings=settings)
    target = int(share * context.tokens.context_window)
    before = context.tokens.total
    if before <= target:
        raise FailedPrecondition(
            f"agent '{agent_id}' uses {before} tokens, already at or below the target of "
            f"{target} ({share:.0%} of {context.tokens.context_window}); nothing to compact"
        )
    messages = list(context.messages)
    cut = choose_cut(messages, before - target)
    if cut is None:
        raise FailedPrecondition(
            f"agent '{agent_id}' has no assistant message (without pending tool calls) to cut "
            "after; commit a step that ends with an assistant reply first"
        )
    evicted = messages[: cut + 1]
    plan = CompactionPlan(
        plan_id=deps.new_id("plan"),
        tenant=principal.tenant,
        agent_id=agent_id,
        base_context_version=context.context_version,
        message_ids=tuple(m.id for m in evicted),
        created_at=deps.clock(),
    )
    with deps.store.transaction() as tx:
        tx.insert_plan(plan)
    return Plan(plan, evicted, before, before - sum(m.tokens for m in evicted))


@dataclass(frozen=True, slots=True)
class Applied:
    """What ApplyCompaction returns."""

    summary: Message
    context_version: int
    tokens: TokenAccount


def apply_compaction(
    deps: Deps,
    principal: Principal,
    agent_id: str,
    plan_id: str,
    summary: str,
    settings: ContextSettings,
) -> Applied:
    """Replaces the planned messages with one summary message and rebuilds the prompt."""
    access.require_agent_access(principal, agent_id, "compact")
    if not summary.strip():
        raise InvalidArgument("summary", "must not be empty")
    now = deps.clock()
    with deps.store.transaction() as tx:
        agent = tx.get_agent(principal.tenant, agent_id)
        if agent is None:
            raise agent_not_found(agent_id)
        plan = tx.get_plan(principal.tenant, plan_id)
        if plan is None or plan.agent_id != agent_id:
            raise NotFound(f"compaction plan '{plan_id}' not found for agent '{agent_id}'")
        if plan.applied_at is not None:
            raise FailedPrecondition(f"compaction plan '{plan_id}' was already applied")
        if agent.context_version != plan.base_context_version:
            raise Aborted(
                f"agent '{agent_id}' window moved from version {plan.base_context_version} to "
                f"{agent.context_version} since the plan; plan the compaction again"
            )
        evicted = set(plan.message_ids)
        message = Message(
            id=deps.new_id("message"),
            agent_id=agent_id,
            role=Role.SUMMARY,
            content=summary,
            created_at=now,
        )
        message = replace(message, tokens=count_message(deps.counter, message))
        kept = [m for m in agent.message_ids[1:] if m not in evicted]
        agent.message_ids = [agent.message_ids[0], message.id, *kept]
        agent.window_size = len(agent.message_ids)
        agent.context_version += 1
        agent.message_count += 1
        # The stored prompt is rebuilt (its counts changed, and compaction already breaks a
        # provider's prefix cache), which also delivers any pending memory update.
        agent.delivered_revision = agent.memory_revision
        tx.insert_messages(principal.tenant, [message], deps.counter.name)
        tx.set_window(agent_id, agent.message_ids)
        tx.set_context(
            principal.tenant,
            agent_id,
            context_version=agent.context_version,
            message_count=agent.message_count,
            delivered_revision=agent.delivered_revision,
        )
        tx.mark_plan_applied(plan_id, now)
        prompt = deps.build_prompt(agent, now)
        tx.save_prompts([prompt])
        tx.emit(
            [
                AgentEvent(
                    kind=EventKind.COMPACTION_APPLIED,
                    tenant=agent.tenant,
                    agent_id=agent_id,
                    memory_revision=agent.revision,
                    context_version=agent.context_version,
                    agent_version=agent.version,
                    time=now,
                ),
                *rebuild_events([agent], [prompt], now),
            ]
        )
    context = compile_context(deps, principal, agent_id, settings=settings)
    return Applied(message, context.context_version, context.tokens)
