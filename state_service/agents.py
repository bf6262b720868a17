"""Agent operations: create, read, list, update, delete, and block attachment."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from cairn_server.auth import Principal
from cairn_server.errors import AlreadyExists, FailedPrecondition, InvalidArgument, NotFound
from cairn_server.paging import fingerprint, next_token, parse_page
from state_service import access, validation
from state_service.blocks import check_expected, new_block
from state_service.core import Deps, agent_not_found, block_not_found, memory_changed
from state_service.memfs.service import create_repository
from state_service.memory_tools import MEMORY_TOOL_NAMES
from state_service.models import (
    AGENT_UPDATABLE,
    DEFAULT_CONTEXT_WINDOW,
    Agent,
    AgentEvent,
    Block,
    EventKind,
    MemoryMode,
    MemoryUpdateMode,
    Message,
    Role,
    Tool,
    ToolRule,
)
from state_service.prompts import rebuild_events
from state_service.store.base import StateTx

# User tools may not shadow the memory tools.
RESERVED_TOOL_NAMES = MEMORY_TOOL_NAMES


@dataclass(slots=True)
class AgentSpec:
    """What a client gives to create an agent."""

    name: str
    system: str = ""
    model: str = ""
    context_window: int = 0
    memory_blocks: list[Block] | None = None
    block_ids: list[str] | None = None
    tools: list[Tool] | None = None
    tool_rules: list[ToolRule] | None = None
    tags: list[str] | None = None
    metadata: dict[str, Any] | None = None
    memory_mode: MemoryMode = MemoryMode.STANDARD
    memory_update_mode: MemoryUpdateMode = MemoryUpdateMode.SYSTEM_PROMPT


def _load(tx: StateTx, principal: Principal, agent_id: str, action: str) -> Agent:
    access.require_agent_access(principal, agent_id, action)
    agent = tx.get_agent(principal.tenant, agent_id)
    if agent is None:
        raise agent_not_found(agent_id)
    return agent


def _load_with_blocks(tx: StateTx, principal: Principal, agent_id: str, action: str) -> Agent:
    agent = _load(tx, principal, agent_id, action)
    if agent.memory_mode is MemoryMode.MEMFS:
        raise FailedPrecondition(
            f"agent '{agent_id}' keeps its memory in files (MEMFS); blocks cannot be "
            "attached, detached or reordered — commit memory files instead"
        )
    return agent


def create_agent(deps: Deps, principal: Principal, spec: AgentSpec) -> Agent:
    """Creates the agent and its new blocks, attaches existing ones, compiles its prompt."""
    access.require_manager(principal, "create agents")
    memfs = spec.memory_mode is MemoryMode.MEMFS
    if memfs:
        deps.snapshots()
        if spec.block_ids:
            raise InvalidArgument(
                "block_ids",
                "a MEMFS agent keeps its memory in its own repository; shared blocks cannot "
                "be attached to it",
            )
    validation.check_name("name", spec.name)
    window = spec.context_window or DEFAULT_CONTEXT_WINDOW
    validation.check_context_window("context_window", window)
    tags = list(spec.tags or [])
    validation.check_tags("tags", tags)
    tools = list(spec.tools or [])
    validation.check_tools("tools", tools, RESERVED_TOOL_NAMES)
    rules = list(spec.tool_rules or [])
    validation.check_tool_rules("tool_rules", rules)
    block_ids = list(spec.block_ids or [])
    if len(set(block_ids)) != len(block_ids):
        raise InvalidArgument("block_ids", "a block id is given twice")
    now = deps.clock()
    created = [
        new_block(deps, principal.tenant, b, now, f"memory_blocks[{i}]")
        for i, b in enumerate(spec.memory_blocks or [])
    ]
    agent_id = deps.new_id("agent")
    if memfs:
        validation.check_unique_labels("memory_blocks", (b.label for b in created))
        try:
            with deps.store.transaction() as tx:
                return _insert_agent(
                    deps,
                    tx,
                    principal,
                    spec,
                    agent_id,
                    window,
                    tools,
                    rules,
                    tags,
                    created,
                    [],
                    now,
                )
        except BaseException:
            deps.snapshots().repos.remove(agent_id)
            raise
    with deps.store.transaction() as tx:
        existing: list[Block] = []
        for block_id in block_ids:
            block = tx.get_block(principal.tenant, block_id)
            if block is None:
                raise block_not_found(block_id)
            existing.append(block)
        blocks = created + existing
        validation.check_unique_labels("memory_blocks", (b.label for b in blocks))
        return _insert_agent(
            deps,
            tx,
            principal,
            spec,
            agent_id,
            window,
            tools,
            rules,
            tags,
            created,
            existing,
            now,
        )


def _insert_agent(
    deps: Deps,
    tx: StateTx,
    principal: Principal,
    spec: AgentSpec,
    agent_id: str,
    window: int,
    tools: list[Tool],
    rules: list[ToolRule],
    tags: list[str],
    created: list[Block],
    existing: list[Block],
    now: float,
) -> Agent:
    """Stores a validated new agent with its window, its new and existing blocks (or, for
    MEMFS, a repository made of the new blocks) and its prompt."""
    memfs = spec.memory_mode is MemoryMode.MEMFS
    blocks = created + existing
    agent = Agent(
        id=agent_id,
        tenant=principal.tenant,
        name=spec.name,
        system=spec.system,
        model=spec.model,
        context_window=window,
        blocks=[] if memfs else blocks,
        tools=tools,
        tool_rules=rules,
        tags=tags,
        metadata=dict(spec.metadata or {}),
        memory_mode=spec.memory_mode,
        memory_update_mode=spec.memory_update_mode,
        memory_revision=1,
        memory_updated_at=now,
        created_at=now,
        updated_at=now,
        context_version=1,
    )
    system_message = Message(
        id=deps.new_id("message"), agent_id=agent.id, role=Role.SYSTEM, created_at=now
    )
    agent.system_message_id = system_message.id
    agent.message_ids = [system_message.id]
    agent.window_size = 1
    if memfs:
        agent.memory_head = create_repository(deps, agent, created, principal.subject)
    else:
        for block in created:
            tx.insert_block(block)
    tx.insert_agent(agent, deps.tools_payload(agent))
    if memfs:
        tx.set_memory_head(agent.tenant, agent.id, agent.memory_head, 1, now)
    else:
        tx.set_agent_blocks(agent.id, [b.id for b in blocks])
    tx.insert_messages(agent.tenant, [system_message], deps.counter.name)
    tx.set_window(agent.id, agent.message_ids)
    tx.save_prompts([deps.build_prompt(agent, now)])
    return agent


def get_agent(deps: Deps, principal: Principal, agent_id: str) -> Agent:
    """One agent of the caller's tenant, with its blocks in render order."""
    access.require_agent_access(principal, agent_id, "read")
    agent = deps.store.reader().get_agent(principal.tenant, agent_id)
    if agent is None:
        raise agent_not_found(agent_id)
    return agent


def list_agents(
    deps: Deps,
    principal: Principal,
    *,
    page_size: int,
    page_token: str,
    tags: list[str],
    match_all_tags: bool,
    name: str,
) -> tuple[list[Agent], str]:
    """A page of agents in creation order, and the next page's token."""
    access.require_manager(principal, "list agents")
    query = fingerprint("agents", sorted(tags), match_all_tags, name)
    page = parse_page(page_size, page_token, query)
    rows = deps.store.reader().list_agents(
        principal.tenant,
        after=page.after,
        limit=page.size + 1,
        tags=tags,
        match_all_tags=match_all_tags,
        name=name,
    )
    token = next_token([key for key, _ in rows], page, query)
    return [agent for _, agent in rows[: page.size]], token


def update_agent(
    deps: Deps,
    principal: Principal,
    agent_id: str,
    changes: dict[str, Any],
    expected_version: int | None,
) -> tuple[Agent, bool]:
    """Applies `changes`; returns the agent and whether its prompt was rebuilt."""
    if not changes:
        raise InvalidArgument("update_mask", "must name at least one field to update")
    unknown = sorted(set(changes) - AGENT_UPDATABLE)
    if unknown:
        raise InvalidArgument(
            "update_mask",
            f"unknown or read-only field {unknown[0]!r}; updatable: "
            f"{', '.join(sorted(AGENT_UPDATABLE))}",
        )
    if "name" in changes:
        validation.check_name("agent.name", changes["name"])
    if "context_window" in changes:
        validation.check_context_window("agent.context_window", changes["context_window"])
    if "tags" in changes:
        validation.check_tags("agent.tags", changes["tags"])
    if "tools" in changes:
        validation.check_tools("agent.tools", changes["tools"], RESERVED_TOOL_NAMES)
    if "tool_rules" in changes:
        validation.check_tool_rules("agent.tool_rules", changes["tool_rules"])
    now = deps.clock()
    with deps.store.transaction() as tx:
        agent = _load(tx, principal, agent_id, "update")
        check_expected("agent", agent_id, agent.version, expected_version)
        updated = replace(agent, **changes)
        changed = {name for name in changes if getattr(updated, name) != getattr(agent, name)}
        if not changed:
            return agent, False
        updated.version += 1
        updated.updated_at = now
        if "tool_rules" in changed:
            # Tool rules render inside compiled memory: a memory change like any other.
            updated.memory_revision += 1
            updated.memory_updated_at = now
        tx.update_agent(updated, deps.tools_payload(updated))
        rebuilt = "system" in changed or (
            "tool_rules" in changed and updated.memory_update_mode is MemoryUpdateMode.SYSTEM_PROMPT
        )
        events = [_event(EventKind.AGENT_UPDATED, updated, now)]
        if rebuilt:
            prompt = deps.build_prompt(updated, now)
            tx.save_prompts([prompt])
            events += rebuild_events([updated], [prompt], now)
        tx.emit(events)
    return updated, rebuilt


def _event(kind: EventKind, agent: Agent, now: float) -> AgentEvent:
    return AgentEvent(
        kind=kind,
        tenant=agent.tenant,
        agent_id=agent.id,
        memory_revision=agent.revision,
        context_version=agent.context_version,
        agent_version=agent.version,
        time=now,
    )


def delete_agent(
    deps: Deps, principal: Principal, agent_id: str, expected_version: int | None
) -> None:
    """Deletes the agent; its blocks stay."""
    access.require_manager(principal, "delete agents")
    now = deps.clock()
    with deps.store.transaction() as tx:
        agent = _load(tx, principal, agent_id, "delete")
        check_expected("agent", agent_id, agent.version, expected_version)
        tx.delete_agent(principal.tenant, agent_id)
        tx.emit([_event(EventKind.AGENT_DELETED, agent, now)])
    if agent.memory_mode is MemoryMode.MEMFS:
        deps.snapshots().repos.remove(agent_id)


def attach_block(
    deps: Deps,
    principal: Principal,
    agent_id: str,
    block_id: str,
    position: int | None,
    expected_version: int | None,
) -> Agent:
    """Attaches an existing block at `position` (default: last)."""
    access.require_manager(principal, "attach blocks")
    now = deps.clock()
    with deps.store.transaction() as tx:
        agent = _load_with_blocks(tx, principal, agent_id, "attach blocks to")
        check_expected("agent", agent_id, agent.version, expected_version)
        block = tx.get_block(principal.tenant, block_id)
        if block is None:
            raise block_not_found(block_id)
        if any(b.id == block_id for b in agent.blocks):
            raise AlreadyExists(f"block '{block_id}' is already attached to agent '{agent_id}'")
        if any(b.label == block.label for b in agent.blocks):
            raise AlreadyExists(f"agent '{agent_id}' already has a block labelled '{block.label}'")
        where = len(agent.blocks) if position is None else position
        if not 0 <= where <= len(agent.blocks):
            raise InvalidArgument(
                "position", f"must be between 0 and {len(agent.blocks)}, got {position}"
            )
        agent.blocks.insert(where, block)
        tx.set_agent_blocks(agent_id, [b.id for b in agent.blocks])
        memory_changed(
            deps, tx, [agent], now, EventKind.BLOCKS_CHANGED, block_id=block_id, bump_version=True
        )
    return agent


def detach_block(
    deps: Deps,
    principal: Principal,
    agent_id: str,
    block_id: str,
    expected_version: int | None,
) -> Agent:
    """Detaches a block from the agent; the block itself stays."""
    access.require_manager(principal, "detach blocks")
    now = deps.clock()
    with deps.store.transaction() as tx:
        agent = _load_with_blocks(tx, principal, agent_id, "detach blocks from")
        check_expected("agent", agent_id, agent.version, expected_version)
        if not any(b.id == block_id for b in agent.blocks):
            raise NotFound(f"block '{block_id}' is not attached to agent '{agent_id}'")
        agent.blocks = [b for b in agent.blocks if b.id != block_id]
        tx.set_agent_blocks(agent_id, [b.id for b in agent.blocks])
        memory_changed(
            deps, tx, [agent], now, EventKind.BLOCKS_CHANGED, block_id=block_id, bump_version=True
        )
    return agent


def reorder_blocks(
    deps: Deps,
    principal: Principal,
    agent_id: str,
    block_ids: list[str],
    expected_version: int | None,
) -> Agent:
    """Sets the render order; `block_ids` must be a permutation of the attached blocks."""
    access.require_manager(principal, "reorder blocks of")
    now = deps.clock()
    with deps.store.transaction() as tx:
        agent = _load_with_blocks(tx, principal, agent_id, "reorder blocks of")
        check_expected("agent", agent_id, agent.version, expected_version)
        by_id = {b.id: b for b in agent.blocks}
        if sorted(block_ids) != sorted(by_id):
            raise InvalidArgument(
                "block_ids",
                f"must list each of the agent's {len(by_id)} attached blocks exactly once",
            )
        if block_ids == [b.id for b in agent.blocks]:
            return agent
        agent.blocks = [by_id[block_id] for block_id in block_ids]
        tx.set_agent_blocks(agent_id, block_ids)
        memory_changed(deps, tx, [agent], now, EventKind.BLOCKS_CHANGED, bump_version=True)
    return agent
