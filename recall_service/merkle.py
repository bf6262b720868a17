"""RFC 6962 Merkle trees kept incrementally, and proofs from stored nodes.

A tree of n leaves is stored as its *perfect* subtrees: node (level, index) covers leaves
[index * 2^level, (index + 1) * 2^level) and exists once its last leaf is appended. Appending
a leaf adds one node per trailing 1-bit of its index (two on average). Any subtree an RFC 6962
proof or tree head needs, for any size up to n, splits into at most log2(n) stored nodes, so
heads and proofs read O(log n) nodes and never rebuild the tree.

Proofs are computed in two passes over the same code: the first records which nodes it needs
(their coordinates do not depend on their values), the store fetches them in one query, the
second computes. `NodeSource` is the one thing a store provides.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping, Sequence

Coord = tuple[int, int]
NodeSource = Callable[[int, int], bytes]

EMPTY_ROOT = hashlib.sha256(b"").digest()
_ZERO = bytes(32)


def hash_children(left: bytes, right: bytes) -> bytes:
    """An interior node: SHA-256(0x01 ‖ left ‖ right)."""
    return hashlib.sha256(b"\x01" + left + right).digest()


def _split(n: int) -> int:
    """The largest power of two smaller than n (n >= 2)."""
    return 1 << ((n - 1).bit_length() - 1)


def subtree(node: NodeSource, lo: int, hi: int) -> bytes:
    """MTH(D[lo:hi]) for a range RFC 6962 produces (lo a multiple of the split size)."""
    n = hi - lo
    if n & (n - 1) == 0:
        level = n.bit_length() - 1
        return node(level, lo >> level)
    k = _split(n)
    return hash_children(subtree(node, lo, lo + k), subtree(node, lo + k, hi))


def root(node: NodeSource, size: int) -> bytes:
    """The tree head of the first `size` leaves."""
    return EMPTY_ROOT if size == 0 else subtree(node, 0, size)


def _path(node: NodeSource, m: int, lo: int, hi: int) -> list[bytes]:
    n = hi - lo
    if n == 1:
        return []
    k = _split(n)
    if m < k:
        return [*_path(node, m, lo, lo + k), subtree(node, lo + k, hi)]
    return [*_path(node, m - k, lo + k, hi), subtree(node, lo, lo + k)]


def inclusion_proof(node: NodeSource, index: int, size: int) -> list[bytes]:
    """PATH(index, D[0:size]) of RFC 6962 §2.1.1. Requires 0 <= index < size."""
    if not 0 <= index < size:
        raise ValueError(f"leaf index {index} is outside a tree of size {size}")
    return _path(node, index, 0, size)


def _subproof(node: NodeSource, m: int, lo: int, hi: int, whole: bool) -> list[bytes]:
    n = hi - lo
    if m == n:
        return [] if whole else [subtree(node, lo, hi)]
    k = _split(n)
    if m <= k:
        return [*_subproof(node, m, lo, lo + k, whole), subtree(node, lo + k, hi)]
    return [*_subproof(node, m - k, lo + k, hi, False), subtree(node, lo, lo + k)]


def consistency_proof(node: NodeSource, size1: int, size2: int) -> list[bytes]:
    """PROOF(size1, D[0:size2]) of RFC 6962 §2.1.2; empty when size1 is 0 or size2."""
    if not 0 <= size1 <= size2:
        raise ValueError(f"no consistency proof from size {size1} to size {size2}")
    if size1 in (0, size2):
        return []
    return _subproof(node, size1, 0, size2, True)


def needed(compute: Callable[[NodeSource], object]) -> list[Coord]:
    """The stored nodes `compute` reads, found by running it on placeholder hashes."""
    coords: list[Coord] = []

    def record(level: int, index: int) -> bytes:
        coords.append((level, index))
        return _ZERO

    compute(record)
    return sorted(set(coords))


def from_mapping(nodes: Mapping[Coord, bytes]) -> NodeSource:
    """A NodeSource over fetched nodes."""

    def node(level: int, index: int) -> bytes:
        return nodes[(level, index)]

    return node


# --- appending -----------------------------------------------------------------------------


def peak_coords(size: int) -> list[Coord]:
    """The perfect subtrees a tree of `size` leaves decomposes into, left to right."""
    coords: list[Coord] = []
    start = 0
    for level in range(size.bit_length() - 1, -1, -1):
        if size >> level & 1:
            coords.append((level, start >> level))
            start += 1 << level
    return coords


def root_of_peaks(peaks: Sequence[bytes]) -> bytes:
    """The tree head from its peaks (left to right): right-fold with hash_children."""
    if not peaks:
        return EMPTY_ROOT
    acc = peaks[-1]
    for peak in reversed(peaks[:-1]):
        acc = hash_children(peak, acc)
    return acc


def append(
    peaks: Sequence[bytes], size: int, leaves: Iterable[bytes]
) -> tuple[list[bytes], int, dict[Coord, bytes]]:
    """Appends leaves to a tree given by its peaks; returns the new peaks, the new size and
    every new node (level 0 included)."""
    stack = list(peaks)
    nodes: dict[Coord, bytes] = {}
    for leaf in leaves:
        nodes[(0, size)] = leaf
        stack.append(leaf)
        level, index = 0, size
        while index & 1:
            right = stack.pop()
            left = stack.pop()
            level, index = level + 1, index >> 1
            parent = hash_children(left, right)
            nodes[(level, index)] = parent
            stack.append(parent)
        size += 1
    return stack, size, nodes


def all_nodes(leaves: Sequence[bytes]) -> dict[Coord, bytes]:
    """Every perfect-subtree node over `leaves` (for verification from scratch)."""
    _, _, nodes = append([], 0, leaves)
    return nodes
