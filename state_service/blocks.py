"""Block operations: create, read, list, update (with fan-out to every agent), delete."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from cairn_server.auth import Principal
from cairn_server.errors import (
    Aborted,
    AlreadyExists,
    FailedPrecondition,
    InvalidArgument,
)
from cairn_server.paging import fingerprint, next_token, parse_page
from state_service import access, validation
from state_service.core import Deps, block_not_found, memory_changed
from state_service.models import (
    BLOCK_UPDATABLE,
    PROMPT_FIELDS,
    AgentEvent,
    Block,
    EventKind,
)
from state_service.store.base import StateReader, StateTx


@dataclass(frozen=True, slots=True)
class BlockUpdate:
    """The outcome of UpdateBlock."""

    block: Block
    affected_agent_ids: list[str]
    rebuilt_agent_ids: list[str]


def check_expected(kind: str, resource_id: str, current: int, expected: int | None) -> None:
    """Optimistic concurrency: ABORTED when the caller saw an older version."""
    if expected is not None and expected != current:
        raise Aborted(
            f"{kind} '{resource_id}' is at version {current}, not the expected {expected}; "
            "re-read it and retry"
        )


def new_block(deps: Deps, tenant: str, spec: Block, now: float, field: str) -> Block:
    """A validated new block from a client's spec."""
    block = replace(
        spec,
        id=deps.new_id("block"),
        tenant=tenant,
        version=1,
        created_at=now,
        updated_at=now,
        tags=list(spec.tags),
        metadata=dict(spec.metadata),
    )
    validation.check_block(field, block)
    return block


def create_block(deps: Deps, principal: Principal, spec: Block) -> Block:
    """Creates a standalone block."""
    access.require_manager(principal, "create blocks")
    now = deps.clock()
    block = new_block(deps, principal.tenant, spec, now, "block")
    with deps.store.transaction() as tx:
        tx.insert_block(block)
    return block


def get_block(deps: Deps, principal: Principal, block_id: str) -> Block:
    """One block of the caller's tenant."""
    reader = deps.store.reader()
    block = reader.get_block(principal.tenant, block_id)
    if block is None:
        raise block_not_found(block_id)
    access.require_block_access(principal, block_id, _attached(reader, principal, block_id), "read")
    return block


def _attached(reader: StateReader, principal: Principal, block_id: str) -> list[str]:
    return reader.agent_ids_with_block(principal.tenant, block_id)


def list_blocks(
    deps: Deps,
    principal: Principal,
    *,
    page_size: int,
    page_token: str,
    label: str,
    tags: list[str],
    match_all_tags: bool,
) -> tuple[list[Block], str]:
    """A page of blocks in creation order, and the next page's token."""
    access.require_manager(principal, "list blocks")
    query = fingerprint("blocks", label, sorted(tags), match_all_tags)
    page = parse_page(page_size, page_token, query)
    rows = deps.store.reader().list_blocks(
        principal.tenant,
        after=page.after,
        limit=page.size + 1,
        label=label,
        tags=tags,
        match_all_tags=match_all_tags,
    )
    token = next_token([key for key, _ in rows], page, query)
    return [block for _, block in rows[: page.size]], token


def update_block(
    deps: Deps,
    principal: Principal,
    block_id: str,
    changes: dict[str, Any],
    expected_version: int | None,
) -> BlockUpdate:
    """Applies `changes`; a prompt-affecting change bumps and rebuilds every attached agent
    in the same transaction. A change that changes nothing writes nothing."""
    if not changes:
        raise InvalidArgument("update_mask", "must name at least one field to update")
    unknown = sorted(set(changes) - BLOCK_UPDATABLE)
    if unknown:
        raise InvalidArgument(
            "update_mask",
            f"unknown or read-only field {unknown[0]!r}; updatable: "
            f"{', '.join(sorted(BLOCK_UPDATABLE))}",
        )
    now = deps.clock()
    with deps.store.transaction() as tx:
        block = tx.get_block(principal.tenant, block_id)
        if block is None:
            raise block_not_found(block_id)
        attached = tx.agent_ids_with_block(principal.tenant, block_id)
        access.require_block_access(principal, block_id, attached, "update")
        check_expected("block", block_id, block.version, expected_version)
        return change_block(deps, tx, block, attached, changes, now)


def change_block(
    deps: Deps,
    tx: StateTx,
    block: Block,
    attached: list[str],
    changes: dict[str, Any],
    now: float,
) -> BlockUpdate:
    """Applies validated `changes` to `block` inside `tx`, with the fan-out to every attached
    agent: the one path by which a block changes, for UpdateBlock and memory tools alike."""
    updated = replace(block, **changes)
    _check_update(block, updated)
    changed = {name for name in changes if getattr(updated, name) != getattr(block, name)}
    if not changed:
        return BlockUpdate(block, [], [])
    updated.version = block.version + 1
    updated.updated_at = now
    agents = tx.load_agents(block.tenant, attached, windows=False)
    if "label" in changed:
        for agent in agents:
            if any(b.label == updated.label and b.id != block.id for b in agent.blocks):
                raise AlreadyExists(
                    f"agent '{agent.id}' already has a block labelled '{updated.label}'"
                )
    tx.update_block(updated)
    for agent in agents:
        agent.blocks = [updated if b.id == block.id else b for b in agent.blocks]
    if changed & PROMPT_FIELDS:
        rebuilt = memory_changed(deps, tx, agents, now, EventKind.BLOCK_UPDATED, block_id=block.id)
        return BlockUpdate(updated, attached, rebuilt)
    tx.emit(
        [
            AgentEvent(
                kind=EventKind.BLOCK_UPDATED,
                tenant=agent.tenant,
                agent_id=agent.id,
                memory_revision=agent.revision,
                context_version=agent.context_version,
                agent_version=agent.version,
                time=now,
                block_id=block.id,
            )
            for agent in agents
        ]
    )
    return BlockUpdate(updated, [], [])


def _check_update(old: Block, new: Block) -> None:
    validation.check_label("block.label", new.label)
    validation.check_limit("block.limit", new.limit)
    validation.check_tags("block.tags", new.tags)
    if new.limit != old.limit and len(new.value) > new.limit and new.value == old.value:
        raise InvalidArgument(
            "block.limit",
            f"{new.limit} is below the current value's length of {len(new.value)}",
        )
    validation.check_value_fits("block.value", new.value, new.limit)


def delete_block(
    deps: Deps, principal: Principal, block_id: str, force: bool, expected_version: int | None
) -> list[str]:
    """Deletes a block; with `force`, detaches it from every agent first (rebuilding them)."""
    access.require_manager(principal, "delete blocks")
    now = deps.clock()
    with deps.store.transaction() as tx:
        block = tx.get_block(principal.tenant, block_id)
        if block is None:
            raise block_not_found(block_id)
        check_expected("block", block_id, block.version, expected_version)
        attached = tx.agent_ids_with_block(principal.tenant, block_id)
        if attached and not force:
            shown = ", ".join(attached[:5]) + (", ..." if len(attached) > 5 else "")
            raise FailedPrecondition(
                f"block '{block_id}' is attached to {len(attached)} agent(s) ({shown}); "
                "detach it first or pass force=true"
            )
        agents = tx.load_agents(principal.tenant, attached, windows=False)
        for agent in agents:
            agent.blocks = [b for b in agent.blocks if b.id != block_id]
        tx.delete_block(principal.tenant, block_id)
        memory_changed(
            deps, tx, agents, now, EventKind.BLOCKS_CHANGED, block_id=block_id, bump_version=True
        )
    return attached
