"""Writes test/fixtures/verify-vectors.json: what the Python reference computes, for the
TypeScript verifier to match byte for byte.

Every expected value comes from Cairn's Python code: hashes, canonical bytes and outcomes
(accepted, or the exact error message) from the client's `cairn.verify`; proofs from the
server's `recall_service.merkle`; signatures from a fixed Ed25519 seed (Ed25519 is
deterministic, so the file is too). Each right input comes with its mutations (a flipped bit, an
index off by one, a wrong size, a truncated or extended proof, a swapped root, another key).

    .venv/bin/python clients/typescript/scripts/make_verify_vectors.py
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from google.protobuf.timestamp_pb2 import Timestamp

from cairn import verify
from cairn.v1 import recall_pb2 as pb
from recall_service import merkle

OUT = Path(__file__).resolve().parent.parent / "test" / "fixtures" / "verify-vectors.json"

# docs/log-format.md §7.
TENANT, STREAM, CREATED = "acme", "general", 1767225600000000
SIGNING_SEED = bytes(range(100, 132))
OTHER_SEED = bytes(range(200, 232))
RFC6962_LEAVES = [
    "",
    "00",
    "10",
    "2021",
    "3031",
    "40414243",
    "5051525354555657",
    "606162636465666768696a6b6c6d6e6f",
]

Outcome = dict[str, Any]


def ts(micros: int) -> Timestamp:
    return Timestamp(seconds=micros // 1_000_000, nanos=micros % 1_000_000 * 1000)


def ts_json(value: Timestamp) -> dict[str, Any]:
    return {"seconds": str(value.seconds), "nanos": value.nanos}


def outcome(check: Callable[[], object]) -> Outcome:
    """{"ok": true} or {"ok": false, "error": <message>, "seq": <seq or null>}."""
    try:
        check()
    except verify.VerificationError as error:
        return {"ok": False, "error": str(error), "seq": error.seq}
    return {"ok": True}


def flip(value: bytes, bit: int = 0) -> bytes:
    """`value` with one bit flipped (bit 0 is the lowest bit of the first byte)."""
    changed = bytearray(value)
    changed[bit // 8] ^= 1 << (bit % 8)
    return bytes(changed)


# --- records ----------------------------------------------------------------------------------


def seal(fields: dict[str, Any], previous: bytes) -> pb.Record:
    """A record with its content hash, leaf and chain hash computed by `cairn.verify`."""
    record = pb.Record(**fields)
    record.content_hash = verify.content_hash(record.salt, record.content)
    record.leaf_hash = verify.leaf_hash(record)
    record.chain_hash = verify.chain_hash(previous, record.leaf_hash)
    return record


def record_json(record: pb.Record) -> dict[str, Any]:
    return {
        "streamId": record.stream_id,
        "seq": str(record.seq),
        "kind": record.kind,
        "sourceAgentId": record.source_agent_id,
        "writtenBy": record.written_by,
        "subjectAgentId": record.subject_agent_id,
        "role": record.role,
        "targetSeq": str(record.target_seq),
        "content": record.content,
        "salt": record.salt.hex(),
        "contentHash": record.content_hash.hex(),
        "tags": list(record.tags),
        "metadataJson": record.metadata_json,
        "createdAt": ts_json(record.created_at),
        "idempotencyKey": record.idempotency_key,
        **({"occurredAt": ts_json(record.occurred_at)} if record.HasField("occurred_at") else {}),
        "leafHash": record.leaf_hash.hex(),
        "chainHash": record.chain_hash.hex(),
    }


def chain_records(genesis: bytes, first_content: str = "Hello, Bob! ☕") -> list[pb.Record]:
    """The §7 records, then one of every kind and every encoding corner."""
    specs: list[dict[str, Any]] = [
        {  # §7 record 1
            "kind": pb.RECORD_KIND_MESSAGE,
            "source_agent_id": "alice",
            "written_by": "agent:alice",
            "content": first_content,
            "salt": bytes(range(32)),
            "tags": ["greeting", "café"],
            "metadata_json": '{"lang":"en"}',
            "created_at": ts(1767225600123456),
            "idempotency_key": "msg-1",
        },
        {  # §7 record 2
            "kind": pb.RECORD_KIND_ATTACH,
            "written_by": "admin:root",
            "subject_agent_id": "bob",
            "role": pb.PARTICIPANT_ROLE_WRITER,
            "salt": b"\xff" * 32,
            "metadata_json": "{}",
            "created_at": ts(1767225601000000),
        },
        {
            "kind": pb.RECORD_KIND_MESSAGE,
            "source_agent_id": "bob",
            "written_by": "agent:bob",
            "content": "日本語のテキスト, emoji 🧭, and a\nnewline",
            "salt": bytes(range(32, 64)),
            "tags": ["a", "ü", "🏔"],
            "metadata_json": '{"nested":{"k":[1,2,3]},"ß":"ö"}',
            "created_at": ts(1767225601000001),
        },
        {
            "kind": pb.RECORD_KIND_MESSAGE,
            "source_agent_id": "bob",
            "written_by": "admin:root",
            "content": "x" * 1000,
            "salt": bytes(range(64, 96)),
            "metadata_json": "{}",
            "created_at": ts(1767225602999999),
            "idempotency_key": "k" * 200,
        },
        {
            "kind": pb.RECORD_KIND_REDACTION,
            "source_agent_id": "alice",
            "written_by": "agent:alice",
            "content": "asked to forget",
            "salt": bytes(range(96, 128)),
            "target_seq": 3,
            "metadata_json": "{}",
            "created_at": ts(1767225603000000),
        },
        {
            "kind": pb.RECORD_KIND_DETACH,
            "written_by": "service:state",
            "subject_agent_id": "bob",
            "salt": bytes(range(128, 160)),
            "metadata_json": "{}",
            "created_at": ts(1767225604000000),
        },
        {  # history written after the fact: the time it was said (domain v2)
            "kind": pb.RECORD_KIND_MESSAGE,
            "source_agent_id": "alice",
            "written_by": "admin:root",
            "content": "Said long before it was written.",
            "salt": bytes(range(160, 192)),
            "metadata_json": "{}",
            "created_at": ts(1767225605000000),
            "occurred_at": ts(1683504000654321),
        },
    ]
    records = []
    previous = genesis
    for seq, spec in enumerate(specs, start=1):
        record = seal({"stream_id": STREAM, "seq": seq, **spec}, previous)
        previous = record.chain_hash
        records.append(record)
    # Record 3 as the service returns it after the redaction: content and salt erased.
    records[2].content = ""
    records[2].salt = b""
    records[2].redacted = True
    records[2].redacted_by_seq = 5
    return records


def encoding_corners() -> list[dict[str, Any]]:
    """Canonical bytes the service never writes but the encoding defines (i64 times before
    1970, a u64 seq past 2^53): a port must not round them through a float."""
    cases = []
    for name, seq, created in [
        ("before the epoch", 7, -1_500_000),
        ("seq past 2^53", 2**53 + 1, 1767225600000000),
        ("largest int64 seq, earliest time", 2**63 - 1, -(2**63)),
    ]:
        record = seal(
            {
                "stream_id": "s",
                "seq": seq,
                "kind": pb.RECORD_KIND_MESSAGE,
                "source_agent_id": "a",
                "written_by": "agent:a",
                "content": "c",
                "salt": bytes(32),
                "metadata_json": "{}",
                "created_at": ts(created),
            },
            bytes(32),
        )
        cases.append(
            {
                "name": name,
                "record": record_json(record),
                "canonical": verify.record_bytes(record).hex(),
                "leafHash": verify.leaf_hash(record).hex(),
            }
        )
    return cases


def record_from_json(fields: dict[str, Any]) -> pb.Record:
    """The inverse of `record_json`."""
    created = fields["createdAt"]
    record = pb.Record(
        stream_id=fields["streamId"],
        seq=int(fields["seq"]),
        kind=fields["kind"],
        source_agent_id=fields["sourceAgentId"],
        written_by=fields["writtenBy"],
        subject_agent_id=fields["subjectAgentId"],
        role=fields["role"],
        target_seq=int(fields["targetSeq"]),
        content=fields["content"],
        salt=bytes.fromhex(fields["salt"]),
        content_hash=bytes.fromhex(fields["contentHash"]),
        tags=fields["tags"],
        metadata_json=fields["metadataJson"],
        created_at=Timestamp(seconds=int(created["seconds"]), nanos=created["nanos"]),
        idempotency_key=fields["idempotencyKey"],
        leaf_hash=bytes.fromhex(fields["leafHash"]),
        chain_hash=bytes.fromhex(fields["chainHash"]),
    )
    if "occurredAt" in fields:
        said = fields["occurredAt"]
        record.occurred_at.CopyFrom(Timestamp(seconds=int(said["seconds"]), nanos=said["nanos"]))
    return record


def record_mutations(records: list[pb.Record], genesis: bytes) -> list[dict[str, Any]]:
    """verify_records over the chain, and over every way of getting it wrong. A case lists the
    served records to pass (`order`, indexes into `records`) and the fields to change in one
    of them (`edit`, in the JSON form of `records`), so both languages apply the same edit."""
    served = [record_json(r) for r in records]
    n = len(records)

    def case(name: str, order: list[int], at: int = 0, **edit: Any) -> dict[str, Any]:
        given = [dict(served[i]) for i in order]
        if edit:
            given[at].update(edit)
        pbs = [record_from_json(r) for r in given]
        # A chain may start after record 1: from the chain hash of the record before it.
        start = order[0]
        previous = genesis if start == 0 else records[start - 1].chain_hash
        return {
            "name": name,
            "order": order,
            "edit": {"at": at, "fields": edit} if edit else None,
            "previous": previous.hex(),
            "firstSeq": str(start + 1),
            **outcome(lambda: verify.verify_records(pbs, previous, first_seq=start + 1)),
        }

    every = list(range(n))

    def flipped(i: int, field: str, bit: int = 0) -> str:
        return flip(bytes.fromhex(served[i][field]), bit).hex()

    return [
        case("the chain as served", every),
        case("the chain from record 3 on", every[2:]),
        case(
            "the time it was said changed by a microsecond",
            every,
            6,
            occurredAt={"seconds": served[6]["occurredAt"]["seconds"], "nanos": 655321000},
        ),
        case("content changed", every, 0, content="Hello, Bob! ☕ "),
        case("content without a salt", every, 0, salt=""),
        case("a tag changed", every, 0, tags=["greeting", "cafe"]),
        case("tags reordered", every, 0, tags=["café", "greeting"]),
        case("metadata changed", every, 2, metadataJson='{"nested":{"k":[1,2]},"ß":"ö"}'),
        case("author changed", every, 3, sourceAgentId="alice"),
        case("written_by changed", every, 3, writtenBy="agent:bob"),
        case(
            "time changed by a microsecond",
            every,
            1,
            createdAt={"seconds": "1767225601", "nanos": 1000},
        ),
        case("role changed", every, 1, role=pb.PARTICIPANT_ROLE_OWNER),
        case("subject changed", every, 1, subjectAgentId="eve"),
        case("target_seq changed", every, 4, targetSeq="2"),
        case("kind changed", every, 5, kind=pb.RECORD_KIND_ATTACH),
        case("idempotency key dropped", every, 0, idempotencyKey=""),
        case("stored leaf_hash flipped", every, 3, leafHash=flipped(3, "leafHash")),
        case("stored chain_hash flipped", every, 4, chainHash=flipped(4, "chainHash", 255)),
        case(
            "content_hash of the erased record changed",
            every,
            2,
            contentHash=flipped(2, "contentHash"),
        ),
        case("content_hash of 31 bytes", every, 1, contentHash=served[1]["contentHash"][:62]),
        case("a record deleted", [0, 1, *every[3:]]),
        case("two records swapped", [0, 2, 1, *every[3:]]),
        case("seq renumbered", every, 0, seq="2"),
    ]


# --- Merkle trees -----------------------------------------------------------------------------


def tree(leaves: list[bytes]) -> merkle.NodeSource:
    return merkle.from_mapping(merkle.all_nodes(leaves))


def inclusion_cases(
    leaves: list[bytes], pairs: list[tuple[int, int]], mutated: set[tuple[int, int]]
) -> list[dict[str, Any]]:
    """Proofs from the server's merkle module, judged by `cairn.verify.verify_inclusion`: every
    pair in `pairs`, and the mutations of those in `mutated`."""
    nodes = tree(leaves)
    cases = []

    def case(
        name: str, leaf: bytes, index: int, size: int, proof: list[bytes], root: bytes
    ) -> None:
        cases.append(
            {
                "name": name,
                "leaf": leaf.hex(),
                "index": str(index),
                "size": str(size),
                "proof": [p.hex() for p in proof],
                "root": root.hex(),
                **outcome(lambda: verify.verify_inclusion(leaf, index, size, proof, root)),
            }
        )

    for index, size in pairs:
        proof = merkle.inclusion_proof(nodes, index, size)
        root = merkle.root(nodes, size)
        leaf = leaves[index]
        at = f"leaf {index} of {size}"
        case(at, leaf, index, size, proof, root)
        if (index, size) not in mutated:
            continue
        case(f"{at}, leaf flipped", flip(leaf), index, size, proof, root)
        case(f"{at}, root flipped", leaf, index, size, proof, flip(root, 7))
        case(f"{at}, index + 1", leaf, index + 1, size, proof, root)
        if index > 0:
            case(f"{at}, index - 1", leaf, index - 1, size, proof, root)
        case(f"{at}, size + 1", leaf, index, size + 1, proof, root)
        if size > 1:
            case(f"{at}, size - 1", leaf, index, size - 1, proof, root)
        if proof:
            case(
                f"{at}, first sibling flipped",
                leaf,
                index,
                size,
                [flip(proof[0]), *proof[1:]],
                root,
            )
            case(f"{at}, last sibling dropped", leaf, index, size, proof[:-1], root)
            case(f"{at}, siblings reversed", leaf, index, size, proof[::-1], root)
        case(f"{at}, extra sibling", leaf, index, size, [*proof, leaf], root)
        other = merkle.root(nodes, size - 1) if size > 1 else merkle.EMPTY_ROOT
        case(f"{at}, root of size {size - 1}", leaf, index, size, proof, other)
    case("empty tree", leaves[0], 0, 0, [], merkle.EMPTY_ROOT)
    case("negative index", leaves[0], -1, 4, [], merkle.root(nodes, 4))
    return cases


def consistency_cases(
    leaves: list[bytes], pairs: list[tuple[int, int]], mutated: set[tuple[int, int]]
) -> list[dict[str, Any]]:
    """Proofs from the server's merkle module, judged by `cairn.verify.verify_consistency`:
    every pair in `pairs`, and the mutations of those in `mutated`."""
    nodes = tree(leaves)
    cases = []

    def case(name: str, size1: int, size2: int, proof: list[bytes], r1: bytes, r2: bytes) -> None:
        cases.append(
            {
                "name": name,
                "size1": str(size1),
                "size2": str(size2),
                "proof": [p.hex() for p in proof],
                "root1": r1.hex(),
                "root2": r2.hex(),
                **outcome(lambda: verify.verify_consistency(size1, size2, proof, r1, r2)),
            }
        )

    for size1, size2 in pairs:
        proof = merkle.consistency_proof(nodes, size1, size2)
        r1, r2 = merkle.root(nodes, size1), merkle.root(nodes, size2)
        at = f"{size1} to {size2}"
        case(at, size1, size2, proof, r1, r2)
        if (size1, size2) not in mutated:
            continue
        case(f"{at}, first root flipped", size1, size2, proof, flip(r1), r2)
        case(f"{at}, second root flipped", size1, size2, proof, r1, flip(r2))
        case(f"{at}, roots swapped", size1, size2, proof, r2, r1)
        if proof:
            case(f"{at}, first node flipped", size1, size2, [flip(proof[0]), *proof[1:]], r1, r2)
            case(f"{at}, last node dropped", size1, size2, proof[:-1], r1, r2)
        case(f"{at}, extra node", size1, size2, [*proof, r1], r1, r2)
        if size2 > size1:
            case(f"{at}, size2 + 1", size1, size2 + 1, proof, r1, r2)
        if size1 > 1:
            case(f"{at}, size1 - 1", size1 - 1, size2, proof, r1, r2)
    case("from the empty tree", 0, 5, [], merkle.EMPTY_ROOT, merkle.root(nodes, 5))
    case(
        "from the empty tree with a proof",
        0,
        5,
        [leaves[0]],
        merkle.EMPTY_ROOT,
        merkle.root(nodes, 5),
    )
    case("sizes backwards", 5, 3, [], merkle.root(nodes, 5), merkle.root(nodes, 3))
    return cases


# --- checkpoints ------------------------------------------------------------------------------


def raw_public(private: Ed25519PrivateKey) -> bytes:
    return private.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)


def checkpoint_json(cp: pb.Checkpoint) -> dict[str, Any]:
    return {
        "tenant": cp.tenant,
        "streamId": cp.stream_id,
        "size": str(cp.size),
        "root": cp.root.hex(),
        "chainHead": cp.chain_head.hex(),
        "time": ts_json(cp.time),
        "keyId": cp.key_id,
        "signature": cp.signature.hex(),
    }


def signed_checkpoint(
    key: Ed25519PrivateKey, records: list[pb.Record], size: int, time: int, root: bytes = b""
) -> pb.Checkpoint:
    """A checkpoint of the first `size` records (with `root` instead of theirs, when given)."""
    cp = pb.Checkpoint(
        tenant=TENANT,
        stream_id=STREAM,
        size=size,
        root=root or verify.root_from_leaves([r.leaf_hash for r in records[:size]]),
        chain_head=records[size - 1].chain_hash,
        time=ts(time),
    )
    cp.signature = key.sign(verify.checkpoint_bytes(cp))
    return cp


def log_cases(records: list[pb.Record], genesis: bytes) -> list[dict[str, Any]]:
    """verify_log: records from seq 1 against a checkpoint the client kept. A case passes the
    served records listed in `order`, or the records it carries (`records`)."""
    key = Ed25519PrivateKey.from_private_bytes(SIGNING_SEED)
    public = raw_public(key)
    kept = signed_checkpoint(key, records, 6, 1767225605000000)
    early = signed_checkpoint(key, records, 2, 1767225602000000)
    rewritten = chain_records(genesis, first_content="Hello, Eve!")
    wrong_root = signed_checkpoint(key, records, 6, 1767225605000000, root=bytes(32))
    cases = []

    def case(name: str, given: list[pb.Record], cp: pb.Checkpoint, **shape: Any) -> None:
        result = outcome(lambda: verify.verify_log(given, genesis, cp, public))
        cases.append({"name": name, **shape, "checkpoint": checkpoint_json(cp), **result})

    every = list(range(len(records)))
    case("every record against the latest checkpoint", records, kept, order=every)
    case("every record against an earlier checkpoint", records, early, order=every)
    case("the records the checkpoint covers", records[:2], early, order=[0, 1])
    case("the last records missing", records[:4], kept, order=every[:4])
    case(
        "records out of order",
        [records[1], records[0], *records[2:]],
        kept,
        order=[1, 0, *every[2:]],
    )
    case(
        "history rewritten and rehashed",
        rewritten,
        kept,
        records=[record_json(r) for r in rewritten],
    )
    case("a signed checkpoint with another root", records, wrong_root, order=every)
    return cases


def checkpoint_cases(records: list[pb.Record]) -> dict[str, Any]:
    """The §7 checkpoint (size 2) and the whole chain's, signed, then every field changed."""
    key = Ed25519PrivateKey.from_private_bytes(SIGNING_SEED)
    other = Ed25519PrivateKey.from_private_bytes(OTHER_SEED)
    public, other_public = raw_public(key), raw_public(other)
    cases = []

    def sign(size: int, time: int) -> pb.Checkpoint:
        return signed_checkpoint(key, records, size, time)

    def case(name: str, cp: pb.Checkpoint, under: bytes, **fields: Any) -> None:
        changed = pb.Checkpoint()
        changed.CopyFrom(cp)
        for field, value in fields.items():
            if field == "time":
                changed.time.CopyFrom(value)
            else:
                setattr(changed, field, value)
        result = outcome(lambda: verify.verify_checkpoint(changed, under))
        if not result["ok"] and result["error"].startswith("not an Ed25519 public key"):
            # The detail after the colon is the crypto library's own wording.
            result["errorPrefix"] = "not an Ed25519 public key:"
            del result["error"]
        signed = outcome(lambda: verify.checkpoint_bytes(changed))
        cases.append(
            {
                "name": name,
                "checkpoint": checkpoint_json(changed),
                "publicKey": under.hex(),
                "signedBytes": verify.checkpoint_bytes(changed).hex() if signed["ok"] else None,
                **result,
            }
        )

    for cp in [sign(2, 1767225602000000), sign(len(records), 1767225605000000)]:
        at = f"size {cp.size}"
        case(at, cp, public)
        case(f"{at}, size + 1", cp, public, size=cp.size + 1)
        case(f"{at}, root flipped", cp, public, root=flip(cp.root))
        case(f"{at}, chain head flipped", cp, public, chain_head=flip(cp.chain_head, 100))
        case(
            f"{at}, a microsecond later",
            cp,
            public,
            time=Timestamp(seconds=cp.time.seconds, nanos=cp.time.nanos + 1000),
        )
        case(
            f"{at}, nanos below a microsecond",
            cp,
            public,
            time=Timestamp(seconds=cp.time.seconds, nanos=cp.time.nanos + 999),
        )
        case(f"{at}, another tenant", cp, public, tenant="acme2")
        case(f"{at}, another stream", cp, public, stream_id="general2")
        case(f"{at}, signature flipped", cp, public, signature=flip(cp.signature, 300))
        case(f"{at}, signature truncated", cp, public, signature=cp.signature[:63])
        case(f"{at}, no signature", cp, public, signature=b"")
        case(f"{at}, another key", cp, other_public)
        case(f"{at}, a key of 31 bytes", cp, public[:31])
        case(f"{at}, root of 31 bytes", cp, public, root=cp.root[:31])
        case(f"{at}, key_id changed (not signed)", cp, public, key_id="0" * 16)
    return {"publicKey": public.hex(), "otherPublicKey": other_public.hex(), "cases": cases}


def vectors() -> dict[str, Any]:
    genesis = verify.genesis_hash(TENANT, STREAM, pb.STREAM_KIND_CONVERSATION, ts(CREATED))
    records = chain_records(genesis)
    rfc = [bytes.fromhex(leaf) for leaf in RFC6962_LEAVES]
    rfc_leaves = [hashlib.sha256(b"\x00" + d).digest() for d in rfc]
    big = [verify.chain_hash(b"leaf", i.to_bytes(4, "big")) for i in range(37)]
    # Every pair of the small tree is checked; mutations of some, chosen to cover a leaf
    # alone, perfect and imperfect trees, first, middle and last leaves.
    inclusion_small = [(i, n) for n in range(1, 9) for i in range(n)]
    inclusion_mutated = {(0, 1), (1, 2), (2, 3), (0, 5), (4, 5), (3, 7), (6, 7), (0, 8), (5, 8)}
    inclusion_big = [(0, 37), (17, 37), (31, 37), (32, 37), (36, 37), (15, 16), (20, 33)]
    consistency_small = [(m, n) for n in range(1, 9) for m in range(1, n + 1)]
    consistency_mutated = {(1, 2), (2, 3), (1, 8), (3, 7), (4, 8), (5, 8), (6, 7), (2, 5), (4, 4)}
    consistency_big = [(1, 37), (16, 37), (17, 37), (32, 33), (36, 37), (37, 37)]
    return {
        "about": "Computed by clients/typescript/scripts/make_verify_vectors.py from the Python "
        "reference (cairn.verify, recall_service.merkle). Do not edit by hand.",
        "genesis": {
            "tenant": TENANT,
            "streamId": STREAM,
            "kind": pb.STREAM_KIND_CONVERSATION,
            "createdAt": ts_json(ts(CREATED)),
            "hash": genesis.hex(),
        },
        "records": [
            {
                "record": record_json(r),
                "canonical": verify.record_bytes(r).hex(),
                "leafHash": verify.leaf_hash(r).hex(),
            }
            for r in records
        ],
        "encodingCorners": encoding_corners(),
        "chains": record_mutations(records, genesis),
        "trees": [
            {
                "name": name,
                "leaves": [leaf.hex() for leaf in leaves],
                "roots": [
                    verify.root_from_leaves(leaves[:n]).hex() for n in range(len(leaves) + 1)
                ],
            }
            for name, leaves in [("RFC 6962 reference leaves", rfc_leaves), ("37 leaves", big)]
        ],
        "inclusion": inclusion_cases(rfc_leaves, inclusion_small, inclusion_mutated)
        + inclusion_cases(big, inclusion_big, set(inclusion_big)),
        "consistency": consistency_cases(rfc_leaves, consistency_small, consistency_mutated)
        + consistency_cases(big, consistency_big, set(consistency_big)),
        "checkpoints": checkpoint_cases(records),
        "logs": log_cases(records, genesis),
    }


def dump(value: dict[str, Any]) -> str:
    """JSON with one line per case: small, and a readable diff when a vector changes."""

    def compact(item: Any) -> str:
        return json.dumps(item, ensure_ascii=False, separators=(",", ":"))

    lines = []
    for key, item in value.items():
        if isinstance(item, list):
            body = ",\n".join(f"  {compact(case)}" for case in item)
            lines.append(f" {compact(key)}: [\n{body}\n ]")
        elif isinstance(item, dict) and isinstance(item.get("cases"), list):
            rest = {k: v for k, v in item.items() if k != "cases"}
            body = ",\n".join(f"  {compact(case)}" for case in item["cases"])
            head = compact(rest)[1:-1]
            lines.append(f' {compact(key)}: {{{head},"cases": [\n{body}\n ]}}')
        else:
            lines.append(f" {compact(key)}: {compact(item)}")
    return "{\n" + ",\n".join(lines) + "\n}\n"


def main() -> None:
    """Writes the fixture."""
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(dump(vectors()), encoding="utf-8")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
