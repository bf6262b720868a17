"""The client's verifier, `cairn.verify`: records and checkpoints, right and every way wrong."""

from __future__ import annotations

from pathlib import Path

import pytest

from cairn import verify
from cairn.v1 import recall_pb2 as pb
from recall_service import merkle
from recall_service.canonical import genesis, seal
from recall_service.convert import checkpoint_to_pb, record_to_pb
from recall_service.models import Draft, RecordKind, StreamKind
from recall_service.signing import Signer, load_or_create

GENESIS = genesis("acme", "s", StreamKind.CONVERSATION, 1_000_000)


def chain(n: int) -> list[pb.Record]:
    records = []
    previous = GENESIS
    for seq in range(1, n + 1):
        draft = Draft(RecordKind.MESSAGE, "alice", "agent:alice", f"message {seq}", ("t",))
        record = seal(draft, "s", seq, 1_000_000 + seq, bytes([seq]) * 32, previous)
        previous = record.chain_hash
        records.append(record_to_pb(record))
    return records


def signed(signer: Signer, records: list[pb.Record]) -> pb.Checkpoint:
    root = merkle.root_of_peaks(merkle.append([], 0, [r.leaf_hash for r in records])[0])
    head = records[-1].chain_hash if records else GENESIS
    return checkpoint_to_pb(signer.checkpoint("acme", "s", len(records), root, head, 5_000_000))


@pytest.fixture
def signer(tmp_path: Path) -> Signer:
    return load_or_create(tmp_path)


def test_a_whole_chain_verifies_and_returns_its_head() -> None:
    records = chain(5)
    assert verify.verify_records(records, GENESIS) == records[-1].chain_hash
    assert verify.verify_records(records[2:], records[1].chain_hash, first_seq=3) == (
        records[-1].chain_hash
    )
    assert verify.verify_records([], GENESIS) == GENESIS


def mutate(records: list[pb.Record], i: int, **fields: object) -> list[pb.Record]:
    changed = [pb.Record() for _ in records]
    for copy, original in zip(changed, records, strict=True):
        copy.CopyFrom(original)
    for name, value in fields.items():
        if name == "tags":
            del changed[i].tags[:]
            changed[i].tags.extend(value)  # type: ignore[arg-type]
        else:
            setattr(changed[i], name, value)
    return changed


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"content": "message 3!"}, "record 3: content does not match content_hash"),
        ({"salt": bytes(32)}, "record 3: content does not match content_hash"),
        ({"salt": b"", "content": "message 3"}, "record 3: content without a salt cannot be verified"),
        ({"tags": ["u"]}, "record 3: leaf_hash does not match the record's fields"),
        ({"metadata_json": '{"a":1}'}, "record 3: leaf_hash does not match the record's fields"),
        ({"source_agent_id": "bob"}, "record 3: leaf_hash does not match the record's fields"),
        ({"written_by": "agent:bob"}, "record 3: leaf_hash does not match the record's fields"),
        ({"idempotency_key": "k"}, "record 3: leaf_hash does not match the record's fields"),
        ({"kind": pb.RECORD_KIND_REDACTION}, "record 3: leaf_hash does not match the record's fields"),
        ({"leaf_hash": bytes(32)}, "record 3: leaf_hash does not match the record's fields"),
        ({"chain_hash": bytes(32)}, "record 3: chain_hash does not follow from the previous record"),
        ({"seq": 4}, "expected record 3, got record 4"),
    ],
    ids=[
        "content", "salt", "no-salt", "tags", "metadata", "author", "writer", "key", "kind",
        "leaf", "chain", "seq",
    ],
)  # fmt: skip
def test_any_changed_field_fails_at_its_record(fields: dict[str, object], message: str) -> None:
    with pytest.raises(verify.VerificationError) as caught:
        verify.verify_records(mutate(chain(5), 2, **fields), GENESIS)
    assert (str(caught.value), caught.value.seq) == (message, 3)


def test_a_redacted_record_verifies_from_its_content_hash() -> None:
    records = mutate(chain(5), 2, content="", salt=b"", redacted=True)
    assert verify.verify_records(records, GENESIS) == records[-1].chain_hash


def test_a_chain_does_not_verify_from_another_streams_genesis() -> None:
    other = genesis("acme", "t", StreamKind.CONVERSATION, 1_000_000)
    with pytest.raises(verify.VerificationError, match="record 1: chain_hash does not follow"):
        verify.verify_records(chain(2), other)


def test_checkpoint_signature_verifies_under_the_signing_key(signer: Signer) -> None:
    verify.verify_checkpoint(signed(signer, chain(3)), signer.public_key)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("size", 4),
        ("root", bytes(32)),
        ("chain_head", bytes(32)),
        ("stream_id", "t"),
        ("tenant", "globex"),
        ("signature", bytes(64)),
    ],
)
def test_changed_checkpoint_fails_its_signature(signer: Signer, field: str, value: object) -> None:
    checkpoint = signed(signer, chain(3))
    setattr(checkpoint, field, value)
    with pytest.raises(verify.VerificationError) as caught:
        verify.verify_checkpoint(checkpoint, signer.public_key)
    assert str(caught.value) == (
        f"the checkpoint of stream '{checkpoint.stream_id}' at size {checkpoint.size} is not "
        "signed by this key"
    )


def test_checkpoint_does_not_verify_under_another_key(signer: Signer, tmp_path: Path) -> None:
    other = load_or_create(tmp_path / "other")
    with pytest.raises(verify.VerificationError, match="is not signed by this key"):
        verify.verify_checkpoint(signed(signer, chain(3)), other.public_key)
    with pytest.raises(verify.VerificationError, match="not an Ed25519 public key"):
        verify.verify_checkpoint(signed(signer, chain(3)), b"short")


def test_log_verifies_against_a_kept_checkpoint_and_its_extensions(signer: Signer) -> None:
    records = chain(6)
    kept = signed(signer, records[:4])
    verify.verify_log(records, GENESIS, kept, signer.public_key)
    verify.verify_log(records[:4], GENESIS, kept, signer.public_key)
    with pytest.raises(verify.VerificationError) as caught:
        verify.verify_log(records[:3], GENESIS, kept, signer.public_key)
    assert (caught.value.seq, str(caught.value)) == (
        4,
        "the checkpoint covers 4 records but only 3 were given: records 4-4 are missing",
    )
