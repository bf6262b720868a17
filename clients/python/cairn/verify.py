"""Verify what a Cairn recall service returns, without trusting it.

Everything here is recomputed from the bytes the server sent, following docs/log-format.md:
content, leaf and chain hashes of records; Ed25519 checkpoint signatures under a public key
you pinned; RFC 6962 inclusion and consistency proofs (the verification algorithms of
RFC 9162 §2.1.3.2 and §2.1.4.2). It shares no code with the server on purpose: it is a
second, independent implementation of the format. Each check returns None (or the value it
computed) and raises `VerificationError` when the data does not verify.

    head = verify_records(records, stream.genesis)         # every record from seq 1
    verify_checkpoint(checkpoint, pinned_public_key)
    verify_inclusion(leaf, index, size, proof, checkpoint.root)
    verify_consistency(old.size, new.size, proof, old.root, new.root)
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Iterable, Sequence

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from google.protobuf.timestamp_pb2 import Timestamp

from cairn.v1 import recall_pb2

__all__ = [
    "VerificationError",
    "chain_hash",
    "checkpoint_bytes",
    "content_hash",
    "genesis_hash",
    "leaf_hash",
    "record_bytes",
    "root_from_leaves",
    "verify_checkpoint",
    "verify_consistency",
    "verify_inclusion",
    "verify_log",
    "verify_records",
]

HASH_SIZE = 32


class VerificationError(Exception):
    """The data does not verify; `seq` names the first record at fault, when one does."""

    def __init__(self, message: str, seq: int | None = None) -> None:
        super().__init__(message)
        self.seq = seq


# --- encoding (docs/log-format.md §1) -------------------------------------------------------


def _u8(value: int) -> bytes:
    return struct.pack(">B", value)


def _u32(value: int) -> bytes:
    return struct.pack(">I", value)


def _u64(value: int) -> bytes:
    return struct.pack(">Q", value)


def _i64(value: int) -> bytes:
    return struct.pack(">q", value)


def _text(value: str) -> bytes:
    raw = value.encode("utf-8")
    return _u32(len(raw)) + raw


def _hash32(value: bytes, what: str) -> bytes:
    if len(value) != HASH_SIZE:
        raise VerificationError(f"{what} must be {HASH_SIZE} bytes, got {len(value)}")
    return value


def _micros(ts: Timestamp) -> int:
    return ts.seconds * 1_000_000 + ts.nanos // 1000


def _sha256(*parts: bytes) -> bytes:
    digest = hashlib.sha256()
    for part in parts:
        digest.update(part)
    return digest.digest()


# --- records (§2-§4) ------------------------------------------------------------------------


def content_hash(salt: bytes, content: str) -> bytes:
    """SHA-256(salt ‖ UTF-8 content)."""
    return _sha256(salt, content.encode("utf-8"))


def record_bytes(record: recall_pb2.Record) -> bytes:
    """The canonical bytes of a record (every field but its hashes, salt and content):
    domain v1, or v2 with `occurred_at` appended when the record has one."""
    occurred = record.HasField("occurred_at")
    return b"".join(
        [
            _text("cairn.recall.record.v2" if occurred else "cairn.recall.record.v1"),
            _text(record.stream_id),
            _u64(record.seq),
            _u8(record.kind),
            _text(record.source_agent_id),
            _text(record.written_by),
            _text(record.subject_agent_id),
            _u8(record.role),
            _u64(record.target_seq),
            _hash32(record.content_hash, "content_hash"),
            _u32(len(record.tags)),
            *(_text(tag) for tag in record.tags),
            _text(record.metadata_json),
            _i64(_micros(record.created_at)),
            _text(record.idempotency_key),
            _i64(_micros(record.occurred_at)) if occurred else b"",
        ]
    )


def leaf_hash(record: recall_pb2.Record) -> bytes:
    """SHA-256(0x00 ‖ canonical bytes): the record's Merkle leaf."""
    return _sha256(b"\x00", record_bytes(record))


def chain_hash(previous: bytes, leaf: bytes) -> bytes:
    """SHA-256(previous chain hash ‖ leaf hash)."""
    return _sha256(previous, leaf)


def genesis_hash(tenant: str, stream_id: str, kind: int, created_at: Timestamp) -> bytes:
    """A stream's chain_hash[0], from its tenant, id, kind and creation time."""
    return _sha256(
        _text("cairn.recall.genesis.v1"),
        _text(tenant),
        _text(stream_id),
        _u8(kind),
        _i64(_micros(created_at)),
    )


def verify_records(
    records: Iterable[recall_pb2.Record], previous: bytes, first_seq: int = 1
) -> bytes:
    """Recomputes content, leaf and chain hashes of consecutive records starting at
    `first_seq`, whose predecessor's chain hash is `previous` (the stream's genesis for seq
    1). Returns the chain hash of the last record (the chain head)."""
    expected = first_seq
    for record in records:
        if record.seq != expected:
            raise VerificationError(
                f"expected record {expected}, got record {record.seq}", expected
            )
        if record.salt:
            if content_hash(record.salt, record.content) != record.content_hash:
                raise VerificationError(
                    f"record {record.seq}: content does not match content_hash", record.seq
                )
        elif record.content:
            raise VerificationError(
                f"record {record.seq}: content without a salt cannot be verified", record.seq
            )
        leaf = leaf_hash(record)
        if leaf != record.leaf_hash:
            raise VerificationError(
                f"record {record.seq}: leaf_hash does not match the record's fields", record.seq
            )
        previous = chain_hash(previous, leaf)
        if previous != record.chain_hash:
            raise VerificationError(
                f"record {record.seq}: chain_hash does not follow from the previous record",
                record.seq,
            )
        expected += 1
    return previous


# --- checkpoints (§5) -----------------------------------------------------------------------


def checkpoint_bytes(checkpoint: recall_pb2.Checkpoint) -> bytes:
    """The bytes a checkpoint's signature covers."""
    return b"".join(
        [
            _text("cairn.recall.checkpoint.v1"),
            _text(checkpoint.tenant),
            _text(checkpoint.stream_id),
            _u64(checkpoint.size),
            _hash32(checkpoint.root, "root"),
            _hash32(checkpoint.chain_head, "chain_head"),
            _i64(_micros(checkpoint.time)),
        ]
    )


def verify_checkpoint(checkpoint: recall_pb2.Checkpoint, public_key: bytes) -> None:
    """Checks the Ed25519 signature of a checkpoint under a raw 32-byte public key."""
    try:
        key = Ed25519PublicKey.from_public_bytes(public_key)
    except ValueError as error:
        raise VerificationError(f"not an Ed25519 public key: {error}") from None
    try:
        key.verify(checkpoint.signature, checkpoint_bytes(checkpoint))
    except InvalidSignature:
        raise VerificationError(
            f"the checkpoint of stream '{checkpoint.stream_id}' at size {checkpoint.size} is "
            "not signed by this key"
        ) from None


def verify_log(
    records: Sequence[recall_pb2.Record],
    genesis: bytes,
    checkpoint: recall_pb2.Checkpoint,
    public_key: bytes,
) -> None:
    """Checks that `records` (seqs 1..n, n >= checkpoint.size) extend a checkpoint you
    kept: its signature, and the chain head and Merkle root at its size."""
    verify_checkpoint(checkpoint, public_key)
    if len(records) < checkpoint.size:
        raise VerificationError(
            f"the checkpoint covers {checkpoint.size} records but only {len(records)} were "
            f"given: records {len(records) + 1}-{checkpoint.size} are missing",
            len(records) + 1,
        )
    covered = records[: checkpoint.size]
    head = verify_records(covered, genesis)
    if head != checkpoint.chain_head:
        raise VerificationError(
            f"the chain head at record {checkpoint.size} differs from the checkpoint's: the "
            "history it covers was rewritten"
        )
    if root_from_leaves([r.leaf_hash for r in covered]) != checkpoint.root:
        raise VerificationError("the Merkle root differs from the checkpoint's")


# --- RFC 6962 Merkle trees (§6) -------------------------------------------------------------


def _node(left: bytes, right: bytes) -> bytes:
    return _sha256(b"\x01", left, right)


def root_from_leaves(leaves: Sequence[bytes]) -> bytes:
    """MTH(D[n]) of RFC 6962 §2.1, from leaf hashes (SHA-256 of "" for no leaves)."""
    if not leaves:
        return _sha256(b"")
    level = list(leaves)
    while len(level) > 1:
        paired = [_node(level[i], level[i + 1]) for i in range(0, len(level) - 1, 2)]
        if len(level) % 2:
            paired.append(level[-1])
        level = paired
    return level[0]


def verify_inclusion(
    leaf_hash: bytes, index: int, size: int, proof: list[bytes], root: bytes
) -> None:
    """Checks that `leaf_hash` is leaf `index` of the tree of `size` leaves with head `root`
    (RFC 9162 §2.1.3.2)."""
    if not 0 <= index < size:
        raise VerificationError(f"leaf index {index} is outside a tree of size {size}")
    fn, sn = index, size - 1
    r = leaf_hash
    for p in proof:
        if sn == 0:
            raise VerificationError("the inclusion proof is too long")
        if fn & 1 or fn == sn:
            r = _node(p, r)
            while not fn & 1 and fn != 0:
                fn >>= 1
                sn >>= 1
        else:
            r = _node(r, p)
        fn >>= 1
        sn >>= 1
    if sn != 0:
        raise VerificationError("the inclusion proof is too short")
    if r != root:
        raise VerificationError("the inclusion proof does not lead to the root")


def verify_consistency(
    size1: int, size2: int, proof: list[bytes], root1: bytes, root2: bytes
) -> None:
    """Checks that the tree of `size2` leaves with head `root2` extends the tree of `size1`
    leaves with head `root1` (RFC 9162 §2.1.4.2)."""
    if not 0 <= size1 <= size2:
        raise VerificationError(f"size1 {size1} and size2 {size2} are not 0 <= size1 <= size2")
    if size1 == size2:
        if proof:
            raise VerificationError("a proof between equal sizes must be empty")
        if root1 != root2:
            raise VerificationError("equal sizes with different roots")
        return
    if size1 == 0:
        if proof:
            raise VerificationError("a proof from the empty tree must be empty")
        return
    if not proof:
        raise VerificationError("the consistency proof is empty")
    path = [root1, *proof] if size1 & (size1 - 1) == 0 else list(proof)
    fn, sn = size1 - 1, size2 - 1
    while fn & 1:
        fn >>= 1
        sn >>= 1
    fr = sr = path[0]
    for c in path[1:]:
        if sn == 0:
            raise VerificationError("the consistency proof is too long")
        if fn & 1 or fn == sn:
            fr = _node(c, fr)
            sr = _node(c, sr)
            while not fn & 1 and fn != 0:
                fn >>= 1
                sn >>= 1
        else:
            sr = _node(sr, c)
        fn >>= 1
        sn >>= 1
    if sn != 0:
        raise VerificationError("the consistency proof is too short")
    if fr != root1:
        raise VerificationError("the consistency proof does not lead to the first root")
    if sr != root2:
        raise VerificationError("the consistency proof does not lead to the second root")
