"""The state service's methods on memory blocks: create, read, list, update, delete, and
attach, detach and reorder them on agents.

Each function builds the call for the client method of the same name (`client.state.<name>`)
and its docstring documents that method; `timeout` as in `agent_calls`. Reads are retried
when the server is unavailable; the other calls are sent once (an update that lost a race is
Aborted, not retried).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from cairn import state_convert as convert
from cairn.calls import DEFAULT_PAGE_SIZE, Call, Paged, field_mask, paged
from cairn.protobuf_values import (
    to_struct,
)
from cairn.state_types import (
    Agent,
    Block,
    BlockSpec,
    BlockUpdate,
)
from cairn.v1 import state_pb2


def create_block(
    label: str,
    value: str = "",
    *,
    limit: int = 0,
    description: str = "",
    read_only: bool = False,
    hidden: bool = False,
    tags: Sequence[str] = (),
    metadata: Mapping[str, Any] | None = None,
    timeout: float | None = None,
) -> Call[Block]:
    """Creates a standalone block, ready to attach to agents (`limit` 0: 20000 characters).
    Raises InvalidArgument (a label that is empty or not tag-safe, a value longer than the
    limit)."""
    spec = BlockSpec(
        label, value, limit, description, read_only, hidden, tuple(tags), dict(metadata or {})
    )
    return Call(
        "state",
        "CreateBlock",
        state_pb2.CreateBlockRequest(block=convert.block_spec_pb(spec)),
        lambda r: convert.block(r.block),
        idempotent=False,
        timeout=timeout,
    )


def get_block(block_id: str, *, timeout: float | None = None) -> Call[Block]:
    """Returns the block. Raises NotFound."""
    return Call(
        "state",
        "GetBlock",
        state_pb2.GetBlockRequest(block_id=block_id),
        lambda r: convert.block(r.block),
        idempotent=True,
        timeout=timeout,
    )


def list_blocks(
    *,
    label: str = "",
    tags: Sequence[str] = (),
    match_all_tags: bool = False,
    page_size: int = DEFAULT_PAGE_SIZE,
    timeout: float | None = None,
) -> Paged[Block]:
    """Iterates over blocks in creation order, only those labelled `label` when given, and
    with any (or all, with `match_all_tags`) of `tags`."""
    return paged(
        "state",
        "ListBlocks",
        lambda token: state_pb2.ListBlocksRequest(
            page_size=page_size,
            page_token=token,
            label=label,
            tags=list(tags),
            match_all_tags=match_all_tags,
        ),
        lambda r: [convert.block(b) for b in r.blocks],
        timeout,
    )


def update_block(
    block_id: str,
    *,
    label: str | None = None,
    value: str | None = None,
    limit: int | None = None,
    description: str | None = None,
    read_only: bool | None = None,
    hidden: bool | None = None,
    tags: Sequence[str] | None = None,
    metadata: Mapping[str, Any] | None = None,
    expected_version: int | None = None,
    timeout: float | None = None,
) -> Call[BlockUpdate]:
    """Sets the fields given (those left None keep their value). A change to a field the
    prompt shows rebuilds the prompt of every agent the block is attached to, in the same
    transaction; the result names them. Raises InvalidArgument, NotFound, AlreadyExists (the
    new label is taken on an attached agent), or Aborted when `expected_version` is stale."""
    fields: list[tuple[str, object]] = [
        ("label", label),
        ("value", value),
        ("limit", limit),
        ("description", description),
        ("read_only", read_only),
        ("hidden", hidden),
        ("tags", tags),
        ("metadata", metadata),
    ]
    values = state_pb2.Block(
        id=block_id,
        label=label or "",
        value=value or "",
        limit=limit or 0,
        description=description or "",
        read_only=bool(read_only),
        hidden=bool(hidden),
        tags=list(tags or ()),
        metadata=to_struct(metadata),
    )
    request = state_pb2.UpdateBlockRequest(
        block=values, update_mask=field_mask(fields), expected_version=expected_version
    )
    return Call(
        "state",
        "UpdateBlock",
        request,
        lambda r: BlockUpdate(
            convert.block(r.block), tuple(r.affected_agent_ids), tuple(r.rebuilt_agent_ids)
        ),
        idempotent=False,
        timeout=timeout,
    )


def delete_block(
    block_id: str,
    *,
    force: bool = False,
    expected_version: int | None = None,
    timeout: float | None = None,
) -> Call[list[str]]:
    """Deletes a block and returns the agents it was detached from (with `force`). Raises
    FailedPrecondition (attached and not `force`), NotFound, or Aborted."""
    return Call(
        "state",
        "DeleteBlock",
        state_pb2.DeleteBlockRequest(
            block_id=block_id, force=force, expected_version=expected_version
        ),
        lambda r: list(r.detached_agent_ids),
        idempotent=False,
        timeout=timeout,
    )


def attach_block(
    agent_id: str,
    block_id: str,
    *,
    position: int | None = None,
    expected_version: int | None = None,
    timeout: float | None = None,
) -> Call[Agent]:
    """Attaches a block to an agent at `position` (0-based; the end when None) and returns
    the agent. Raises NotFound, AlreadyExists (attached already, or the label is taken),
    InvalidArgument (position out of range), or Aborted (the agent's version)."""
    return Call(
        "state",
        "AttachBlock",
        state_pb2.AttachBlockRequest(
            agent_id=agent_id,
            block_id=block_id,
            position=position,
            expected_version=expected_version,
        ),
        lambda r: convert.agent(r.agent),
        idempotent=False,
        timeout=timeout,
    )


def detach_block(
    agent_id: str,
    block_id: str,
    *,
    expected_version: int | None = None,
    timeout: float | None = None,
) -> Call[Agent]:
    """Detaches a block from an agent (the block stays) and returns the agent. Raises
    NotFound or Aborted."""
    return Call(
        "state",
        "DetachBlock",
        state_pb2.DetachBlockRequest(
            agent_id=agent_id, block_id=block_id, expected_version=expected_version
        ),
        lambda r: convert.agent(r.agent),
        idempotent=False,
        timeout=timeout,
    )


def reorder_blocks(
    agent_id: str,
    block_ids: Sequence[str],
    *,
    expected_version: int | None = None,
    timeout: float | None = None,
) -> Call[Agent]:
    """Sets the render order of the agent's blocks (a permutation of the attached ones) and
    returns the agent. Raises InvalidArgument, NotFound or Aborted."""
    return Call(
        "state",
        "ReorderBlocks",
        state_pb2.ReorderBlocksRequest(
            agent_id=agent_id, block_ids=list(block_ids), expected_version=expected_version
        ),
        lambda r: convert.agent(r.agent),
        idempotent=False,
        timeout=timeout,
    )
