"""The canonical encoding: the vectors of docs/log-format.md §7 from both implementations,
and the server's and the client's hashes agreeing on arbitrary records."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from cairn import verify
from recall_service import merkle
from recall_service.canonical import canonical_of, checkpoint_bytes, genesis, seal
from recall_service.convert import checkpoint_to_pb, record_to_pb, timestamp
from recall_service.models import Checkpoint, Draft, Record, RecordKind, Role, StreamKind

DOC = Path(__file__).resolve().parents[2] / "docs" / "log-format.md"
CREATED = 1767225600000000
GENESIS = "09a20c17d2f60be5c2cd71ffaf7848f3e91171af759f5758605ce2fe0d948b9e"
CANONICAL_1 = (
    "00000016636169726e2e726563616c6c2e7265636f72642e76310000000767656e6572616c"
    "00000000000000010100000005616c6963650000000b6167656e743a616c69636500000000"
    "0000000000000000005859e41e4aa14a2dcbd3af9918b39d7b20999896426c436422f868bf"
    "b577435c00000002000000086772656574696e6700000005636166c3a90000000d7b226c61"
    "6e67223a22656e227d0006474846222240000000056d73672d31"
)
CANONICAL_2 = (
    "00000016636169726e2e726563616c6c2e7265636f72642e76310000000767656e6572616c"
    "000000000000000202000000000000000a61646d696e3a726f6f7400000003626f62020000"
    "000000000000af9613760f72635fbdb44a5a0a63c39f12af30f950a6ee5c971be188e89c40"
    "5100000000000000027b7d00064748462f824000000000"
)
# Record 1 again, said at 2023-05-08T13:56:00.654321Z: domain v2, that time appended.
CANONICAL_1_SAID = (
    "00000016636169726e2e726563616c6c2e7265636f72642e76320000000767656e6572616c"
    "00000000000000010100000005616c6963650000000b6167656e743a616c69636500000000"
    "0000000000000000005859e41e4aa14a2dcbd3af9918b39d7b20999896426c436422f868bf"
    "b577435c00000002000000086772656574696e6700000005636166c3a90000000d7b226c61"
    "6e67223a22656e227d0006474846222240000000056d73672d310005fb2effb4b7f1"
)
LEAF_1_SAID = "10022ea47800eac3ba3a794f87d96dd24d9d39b3cd24b928e45347947c4e76c0"
CHECKPOINT = (
    "0000001a636169726e2e726563616c6c2e636865636b706f696e742e76310000000461636d65000000076765"
    "6e6572616c0000000000000002c357ade98375cffff3a39c5f91e60b4f9263eaac8e0c530b17004b7e4f9a54"
    "637412914fdadec58ca61e893814973e926691534a036e2670516bdbf3ae59826100064748463ec480"
)


# §7 record 1 before sealing.
DRAFT_1 = Draft(
    kind=RecordKind.MESSAGE,
    source_agent_id="alice",
    written_by="agent:alice",
    content="Hello, Bob! ☕",
    tags=("greeting", "café"),
    metadata_json='{"lang":"en"}',
    idempotency_key="msg-1",
)


def vector_records() -> tuple[bytes, list[Record]]:
    first = genesis("acme", "general", StreamKind.CONVERSATION, CREATED)
    one = seal(DRAFT_1, "general", 1, 1767225600123456, bytes(range(32)), first)
    two = seal(
        Draft(
            kind=RecordKind.ATTACH,
            source_agent_id="",
            written_by="admin:root",
            content="",
            subject_agent_id="bob",
            role=Role.WRITER,
        ),
        "general",
        2,
        1767225601000000,
        b"\xff" * 32,
        one.chain_hash,
    )
    return first, [one, two]


def test_server_encoding_matches_the_documented_vectors() -> None:
    first, (one, two) = vector_records()
    assert first.hex() == GENESIS
    assert one.content_hash.hex() == (
        "5859e41e4aa14a2dcbd3af9918b39d7b20999896426c436422f868bfb577435c"
    )
    assert canonical_of(one).hex() == CANONICAL_1
    assert len(canonical_of(one)) == 174
    assert one.leaf_hash.hex() == "308ffc9baa75fbcfe846b96e5c6b318e719cf452fd803399da964de1ae81a93e"
    assert one.chain_hash.hex() == (
        "1acb2050de1c7deae2890408f4dffd792adf48f1693ea7b7722d8e64974ea751"
    )
    assert canonical_of(two).hex() == CANONICAL_2
    assert two.leaf_hash.hex() == "a5e1d9d27272abff5c60d1ce95753b375b875ecf17d1f7f2c219257987cf556b"
    assert two.chain_hash.hex() == (
        "7412914fdadec58ca61e893814973e926691534a036e2670516bdbf3ae598261"
    )
    root = merkle.hash_children(one.leaf_hash, two.leaf_hash)
    assert root.hex() == "c357ade98375cffff3a39c5f91e60b4f9263eaac8e0c530b17004b7e4f9a5463"
    signed = checkpoint_bytes("acme", "general", 2, root, two.chain_hash, 1767225602000000)
    assert signed.hex() == CHECKPOINT


def test_client_encoding_matches_the_documented_vectors() -> None:
    _, (one, two) = vector_records()
    pb_one, pb_two = record_to_pb(one), record_to_pb(two)
    assert verify.record_bytes(pb_one).hex() == CANONICAL_1
    assert verify.record_bytes(pb_two).hex() == CANONICAL_2
    assert verify.genesis_hash("acme", "general", 1, timestamp(CREATED)).hex() == GENESIS
    head = verify.verify_records([pb_one, pb_two], bytes.fromhex(GENESIS))
    assert head.hex() == "7412914fdadec58ca61e893814973e926691534a036e2670516bdbf3ae598261"
    root = verify.root_from_leaves([one.leaf_hash, two.leaf_hash])
    checkpoint = Checkpoint("acme", "general", 2, root, head, 1767225602000000, "", b"")
    assert verify.checkpoint_bytes(checkpoint_to_pb(checkpoint)).hex() == CHECKPOINT


def test_a_record_said_before_it_was_written_is_encoded_as_v2_by_both() -> None:
    first, (one, _) = vector_records()
    draft = replace(DRAFT_1, occurred_at=1683554160654321)
    said = seal(draft, "general", 1, 1767225600123456, bytes(range(32)), first)
    assert said.occurred_at == 1683554160654321
    assert canonical_of(said).hex() == CANONICAL_1_SAID
    assert said.leaf_hash.hex() == LEAF_1_SAID != one.leaf_hash.hex()
    pb = record_to_pb(said)
    assert verify.record_bytes(pb).hex() == CANONICAL_1_SAID
    assert verify.leaf_hash(pb) == said.leaf_hash
    pb.ClearField("occurred_at")  # dropping the time is caught: the leaf is v1's
    assert verify.leaf_hash(pb) == one.leaf_hash


def test_the_document_carries_the_vectors_the_tests_check() -> None:
    text = "".join(DOC.read_text().split())
    for vector in (GENESIS, CANONICAL_1, CANONICAL_2, CHECKPOINT, CANONICAL_1_SAID, LEAF_1_SAID):
        assert vector in text


_TEXT = st.text(max_size=20)
_RECORDS = st.builds(
    Draft,
    kind=st.sampled_from(list(RecordKind)),
    source_agent_id=_TEXT,
    written_by=_TEXT,
    content=st.text(max_size=200),
    tags=st.lists(_TEXT, max_size=5).map(tuple),
    metadata_json=_TEXT,
    idempotency_key=_TEXT,
    subject_agent_id=_TEXT,
    role=st.sampled_from(list(Role)),
    target_seq=st.integers(min_value=0, max_value=2**63 - 1),
    occurred_at=st.none() | st.integers(min_value=0, max_value=2**62),
)


@settings(max_examples=200, deadline=None)
@given(
    _RECORDS,
    st.integers(min_value=1, max_value=2**63 - 1),
    st.integers(min_value=-(2**62), max_value=2**62),
    st.binary(min_size=32, max_size=32),
    st.binary(min_size=32, max_size=32),
)
def test_server_and_client_hash_every_record_alike(
    draft: Draft, seq: int, created_at: int, salt: bytes, previous: bytes
) -> None:
    record = seal(draft, "s", seq, created_at, salt, previous)
    pb = record_to_pb(record)
    assert verify.record_bytes(pb) == canonical_of(record)
    assert verify.leaf_hash(pb) == record.leaf_hash
    assert verify.verify_records([pb], previous, first_seq=seq) == record.chain_hash
