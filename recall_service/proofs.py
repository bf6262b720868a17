"""Signed checkpoints and RFC 6962 proofs, computed from stored Merkle nodes."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from cairn_server.auth import Principal
from cairn_server.errors import InvalidArgument
from recall_service import merkle
from recall_service.core import Deps
from recall_service.models import Checkpoint, Stream
from recall_service.reads import readable
from recall_service.store.base import LogReader

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class InclusionProof:
    """A leaf's audit path in a tree of `tree_size` leaves with head `root`."""

    leaf_index: int
    tree_size: int
    leaf_hash: bytes
    proof: list[bytes]
    root: bytes
    checkpoint: Checkpoint | None


@dataclass(frozen=True, slots=True)
class ConsistencyProof:
    """The proof that the tree of `to_size` leaves extends the tree of `from_size`."""

    from_size: int
    to_size: int
    proof: list[bytes]
    from_root: bytes
    to_root: bytes


def _compute(reader: LogReader, stream: Stream, compute: Callable[[merkle.NodeSource], T]) -> T:
    """Runs a proof computation over the nodes it needs, fetched in one query."""
    nodes = reader.nodes(stream, merkle.needed(compute))
    return compute(merkle.from_mapping(nodes))


def _tree_size(field: str, requested: int, stream: Stream) -> int:
    if requested < 0 or requested > stream.size:
        raise InvalidArgument(
            field, f"must be between 0 and the stream's size {stream.size}, got {requested}"
        )
    return requested or stream.size


def get_checkpoint(deps: Deps, principal: Principal, stream_id: str) -> Checkpoint:
    """The latest signed checkpoint."""
    reader, stream = readable(deps, principal, stream_id)
    checkpoint = reader.latest_checkpoint(stream)
    assert checkpoint is not None, "every stream has a checkpoint from its creation"
    return checkpoint


def inclusion_proof(
    deps: Deps, principal: Principal, stream_id: str, seq: int, tree_size: int
) -> InclusionProof:
    """The audit path of record `seq` (leaf seq - 1) in the tree of `tree_size` leaves."""
    reader, stream = readable(deps, principal, stream_id)
    size = _tree_size("tree_size", tree_size, stream)
    if not 1 <= seq <= size:
        raise InvalidArgument("seq", f"must be between 1 and the tree size {size}, got {seq}")
    index = seq - 1

    def compute(node: merkle.NodeSource) -> tuple[list[bytes], bytes, bytes]:
        return merkle.inclusion_proof(node, index, size), merkle.root(node, size), node(0, index)

    proof, root, leaf = _compute(reader, stream, compute)
    checkpoint = reader.latest_checkpoint(stream) if size == stream.size else None
    if checkpoint is not None and checkpoint.size != size:
        checkpoint = None
    return InclusionProof(index, size, leaf, proof, root, checkpoint)


def consistency_proof(
    deps: Deps, principal: Principal, stream_id: str, from_size: int, to_size: int
) -> ConsistencyProof:
    """The proof that the tree of `to_size` leaves extends the tree of `from_size`."""
    reader, stream = readable(deps, principal, stream_id)
    size2 = _tree_size("to_size", to_size, stream)
    if not 0 <= from_size <= size2:
        raise InvalidArgument(
            "from_size", f"must be between 0 and to_size {size2}, got {from_size}"
        )

    def compute(node: merkle.NodeSource) -> tuple[list[bytes], bytes, bytes]:
        return (
            merkle.consistency_proof(node, from_size, size2),
            merkle.root(node, from_size),
            merkle.root(node, size2),
        )

    proof, root1, root2 = _compute(reader, stream, compute)
    return ConsistencyProof(from_size, size2, proof, root1, root2)
