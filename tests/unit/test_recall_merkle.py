"""RFC 6962 trees: the server's incremental tree and proofs against a naive reference, and the
client's verifiers against both, including every way a proof can be wrong."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cairn.verify import VerificationError, root_from_leaves, verify_consistency, verify_inclusion
from recall_service import merkle

# --- the naive reference: RFC 6962 §2.1 read literally, over the leaf hashes -----------------


def _h(*parts: bytes) -> bytes:
    return hashlib.sha256(b"".join(parts)).digest()


def _k(n: int) -> int:
    k = 1
    while k * 2 < n:
        k *= 2
    return k


def mth(d: list[bytes]) -> bytes:
    if not d:
        return _h(b"")
    if len(d) == 1:
        return d[0]
    k = _k(len(d))
    return _h(b"\x01", mth(d[:k]), mth(d[k:]))


def path(m: int, d: list[bytes]) -> list[bytes]:
    if len(d) == 1:
        return []
    k = _k(len(d))
    if m < k:
        return [*path(m, d[:k]), mth(d[k:])]
    return [*path(m - k, d[k:]), mth(d[:k])]


def subproof(m: int, d: list[bytes], b: bool) -> list[bytes]:
    if m == len(d):
        return [] if b else [mth(d)]
    k = _k(len(d))
    if m <= k:
        return [*subproof(m, d[:k], b), mth(d[k:])]
    return [*subproof(m - k, d[k:], False), mth(d[:k])]


def naive_consistency(m: int, d: list[bytes]) -> list[bytes]:
    return [] if m in (0, len(d)) else subproof(m, d, True)


def leaves(n: int) -> list[bytes]:
    return [_h(b"\x00", i.to_bytes(4, "big")) for i in range(n)]


def stored(n: int) -> merkle.NodeSource:
    """The server's node source over a tree grown one append at a time."""
    nodes: dict[merkle.Coord, bytes] = {}
    peaks: list[bytes] = []
    size = 0
    for leaf in leaves(n):
        peaks, size, new = merkle.append(peaks, size, [leaf])
        nodes.update(new)
    return merkle.from_mapping(nodes)


SIZES = st.integers(min_value=0, max_value=300)


def flip(proof: list[bytes], i: int, bit: int) -> list[bytes]:
    mutated = list(proof)
    raw = bytearray(mutated[i])
    raw[bit // 8] ^= 1 << (bit % 8)
    mutated[i] = bytes(raw)
    return mutated


# --- fixed vectors --------------------------------------------------------------------------

# The eight leaves of the RFC 6962 reference tests (certificate-transparency, transparency-dev)
# and the tree heads of their first 1..8 leaves.
RFC_LEAVES = [
    bytes.fromhex(x)
    for x in (
        "",
        "00",
        "10",
        "2021",
        "3031",
        "40414243",
        "5051525354555657",
        "606162636465666768696a6b6c6d6e6f",
    )
]
RFC_ROOTS = [
    "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
    "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
    "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
    "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
    "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
    "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
    "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
    "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
]


def test_tree_heads_match_the_rfc_6962_reference_vectors() -> None:
    hashed = [_h(b"\x00", leaf) for leaf in RFC_LEAVES]
    peaks: list[bytes] = []
    for n, expected in enumerate(RFC_ROOTS, start=1):
        peaks, _, _ = merkle.append(peaks, n - 1, [hashed[n - 1]])
        assert merkle.root_of_peaks(peaks).hex() == expected
        assert root_from_leaves(hashed[:n]).hex() == expected


def test_empty_tree_head_is_sha256_of_nothing() -> None:
    assert merkle.EMPTY_ROOT.hex() == (
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    )
    assert merkle.root(stored(0), 0) == merkle.EMPTY_ROOT
    assert root_from_leaves([]) == merkle.EMPTY_ROOT


def test_appending_adds_one_node_per_trailing_one_bit() -> None:
    _, size, nodes = merkle.append([], 0, leaves(8))
    assert size == 8
    assert sorted(nodes) == [
        (0, 0), (0, 1), (0, 2), (0, 3), (0, 4), (0, 5), (0, 6), (0, 7),
        (1, 0), (1, 1), (1, 2), (1, 3), (2, 0), (2, 1), (3, 0),
    ]  # fmt: skip
    assert merkle.peak_coords(13) == [(3, 0), (2, 2), (0, 12)]


def test_proofs_read_few_nodes_at_a_million_leaves() -> None:
    size = 1_000_000
    inclusion = merkle.needed(lambda node: merkle.inclusion_proof(node, 123_456, size))
    consistency = merkle.needed(lambda node: merkle.consistency_proof(node, 654_321, size))
    head = merkle.needed(lambda node: merkle.root(node, size))
    assert len(inclusion) == 25
    assert len(consistency) == 25
    assert len(head) == 7  # the popcount of 1,000,000


# --- the server against the reference -------------------------------------------------------


@settings(max_examples=150, deadline=None)
@given(SIZES)
def test_incremental_root_matches_reference(n: int) -> None:
    d = leaves(n)
    peaks, size, _ = merkle.append([], 0, d)
    assert size == n
    assert merkle.root_of_peaks(peaks) == mth(d)
    assert merkle.root(stored(n), n) == mth(d)
    assert root_from_leaves(d) == mth(d)


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_inclusion_proofs_match_reference_and_verify(data: st.DataObject) -> None:
    n = data.draw(st.integers(min_value=1, max_value=300))
    index = data.draw(st.integers(min_value=0, max_value=n - 1))
    d = leaves(n)
    proof = merkle.inclusion_proof(stored(n), index, n)
    assert proof == path(index, d)
    verify_inclusion(d[index], index, n, proof, mth(d))


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_inclusion_proofs_for_older_tree_sizes_come_from_the_same_nodes(
    data: st.DataObject,
) -> None:
    n = data.draw(st.integers(min_value=1, max_value=300))
    size = data.draw(st.integers(min_value=1, max_value=n))
    index = data.draw(st.integers(min_value=0, max_value=size - 1))
    d = leaves(n)
    node = stored(n)
    assert merkle.inclusion_proof(node, index, size) == path(index, d[:size])
    assert merkle.root(node, size) == mth(d[:size])


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_consistency_proofs_match_reference_and_verify(data: st.DataObject) -> None:
    n = data.draw(SIZES)
    m = data.draw(st.integers(min_value=0, max_value=n))
    d = leaves(n)
    proof = merkle.consistency_proof(stored(n), m, n)
    assert proof == naive_consistency(m, d)
    verify_consistency(m, n, proof, mth(d[:m]), mth(d))


# --- mutated proofs -------------------------------------------------------------------------


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_mutated_inclusion_proofs_fail(data: st.DataObject) -> None:
    n = data.draw(st.integers(min_value=2, max_value=300))
    index = data.draw(st.integers(min_value=0, max_value=n - 1))
    d = leaves(n)
    root = mth(d)
    proof = path(index, d)
    i = data.draw(st.integers(min_value=0, max_value=len(proof) - 1))
    bit = data.draw(st.integers(min_value=0, max_value=255))
    wrong = [
        (d[index], index, n, flip(proof, i, bit), root),  # a flipped bit in one hash
        (d[index], index, n, proof[:-1], root),  # a hash dropped
        (d[index], index, n, [*proof, proof[0]], root),  # a hash too many
        (d[index], index, n, proof, flip([root], 0, bit)[0]),  # another root
        (flip([d[index]], 0, bit)[0], index, n, proof, root),  # another leaf
        (d[index], index ^ 1 if index ^ 1 < n else index - 1, n, proof, root),  # another index
    ]
    for leaf, idx, size, bad, r in wrong:
        with pytest.raises(VerificationError):
            verify_inclusion(leaf, idx, size, bad, r)


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_mutated_consistency_proofs_fail(data: st.DataObject) -> None:
    n = data.draw(st.integers(min_value=2, max_value=300))
    m = data.draw(st.integers(min_value=1, max_value=n - 1))
    d = leaves(n)
    root1, root2 = mth(d[:m]), mth(d)
    proof = naive_consistency(m, d)
    i = data.draw(st.integers(min_value=0, max_value=len(proof) - 1))
    bit = data.draw(st.integers(min_value=0, max_value=255))
    wrong = [
        (m, n, flip(proof, i, bit), root1, root2),
        (m, n, proof[:-1], root1, root2),
        (m, n, [*proof, proof[0]], root1, root2),
        (m, n, proof, flip([root1], 0, bit)[0], root2),
        (m, n, proof, root1, flip([root2], 0, bit)[0]),
        (m, n, proof, root2, root1),  # swapped roots
        (m, n, [], root1, root2),
    ]
    for size1, size2, bad, r1, r2 in wrong:
        with pytest.raises(VerificationError):
            verify_consistency(size1, size2, bad, r1, r2)


def test_proof_edge_cases() -> None:
    d = leaves(5)
    with pytest.raises(VerificationError, match="outside a tree of size 5"):
        verify_inclusion(d[0], 5, 5, [], mth(d))
    with pytest.raises(VerificationError, match="outside a tree of size 0"):
        verify_inclusion(d[0], 0, 0, [], merkle.EMPTY_ROOT)
    verify_inclusion(d[0], 0, 1, [], d[0])
    with pytest.raises(VerificationError, match="not 0 <= size1 <= size2"):
        verify_consistency(4, 3, [], mth(d[:4]), mth(d[:3]))
    verify_consistency(0, 5, [], merkle.EMPTY_ROOT, mth(d))
    with pytest.raises(VerificationError, match="from the empty tree must be empty"):
        verify_consistency(0, 5, [d[0]], merkle.EMPTY_ROOT, mth(d))
    verify_consistency(5, 5, [], mth(d), mth(d))
    with pytest.raises(VerificationError, match="equal sizes with different roots"):
        verify_consistency(5, 5, [], mth(d), mth(d[:4]))
    with pytest.raises(ValueError, match="leaf index 5 is outside a tree of size 5"):
        merkle.inclusion_proof(stored(5), 5, 5)
    with pytest.raises(ValueError, match="no consistency proof from size 6 to size 5"):
        merkle.consistency_proof(stored(5), 6, 5)
