"""The client's plain types: exact conversions from and to the wire."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from typing import Any

import pytest
from google.protobuf.timestamp_pb2 import Timestamp

import cairn
from cairn import enums, protobuf_values, recall_convert, state_convert, verify
from cairn.v1 import common_pb2, recall_pb2, state_pb2

CODECS = [
    (protobuf_values.MESSAGE_ROLE, common_pb2.MessageRole, "MESSAGE_ROLE_"),
    (protobuf_values.MEMORY_MODE, state_pb2.MemoryMode, "MEMORY_MODE_"),
    (protobuf_values.MEMORY_UPDATE_MODE, state_pb2.MemoryUpdateMode, "MEMORY_UPDATE_MODE_"),
    (protobuf_values.TOOL_RULE_TYPE, state_pb2.ToolRuleType, "TOOL_RULE_TYPE_"),
    (protobuf_values.CONTEXT_STATUS, state_pb2.ContextStatus, "CONTEXT_STATUS_"),
    (protobuf_values.CONTEXT_VIEW, state_pb2.ContextView, "CONTEXT_VIEW_"),
    (protobuf_values.EVENT_TYPE, state_pb2.EventType, "EVENT_TYPE_"),
    (protobuf_values.MEMORY_TOOL_ERROR, state_pb2.MemoryToolError, "MEMORY_TOOL_ERROR_"),
    (protobuf_values.STREAM_KIND, recall_pb2.StreamKind, "STREAM_KIND_"),
    (protobuf_values.PARTICIPANT_ROLE, recall_pb2.ParticipantRole, "PARTICIPANT_ROLE_"),
    (protobuf_values.RECORD_KIND, recall_pb2.RecordKind, "RECORD_KIND_"),
]


@pytest.mark.parametrize(("codec", "wrapper", "prefix"), CODECS)
def test_every_contract_enum_value_has_a_member_and_back(
    codec: protobuf_values.EnumCodec[Any, Any], wrapper: object, prefix: str
) -> None:
    for name, number in wrapper.items():  # type: ignore[attr-defined]
        member = codec.decode(number)
        assert member.name == name.removeprefix(prefix)
        assert codec.encode(member) == number


def test_an_unknown_enum_number_from_a_newer_server_is_unspecified() -> None:
    assert protobuf_values.MESSAGE_ROLE.decode(99) is enums.MessageRole.UNSPECIFIED


def test_enum_members_compare_equal_to_their_names() -> None:
    name: str = "user"
    assert name == cairn.MessageRole.USER
    assert protobuf_values.STREAM_KIND.encode("archival") == recall_pb2.STREAM_KIND_ARCHIVAL


@pytest.mark.parametrize(
    ("seconds", "nanos"),
    [(0, 0), (1_767_323_045, 678_901_000), (-1, 999_999_000), (253_402_300_799, 999_999_000)],
)
def test_timestamps_convert_exactly_both_ways(seconds: int, nanos: int) -> None:
    value = protobuf_values.from_timestamp(Timestamp(seconds=seconds, nanos=nanos))
    assert value.tzinfo is UTC
    back = protobuf_values.to_timestamp(value)
    assert (back.seconds, back.nanos) == (seconds, nanos)


def test_sub_microsecond_digits_are_dropped() -> None:
    value = protobuf_values.from_timestamp(Timestamp(seconds=10, nanos=1_999))
    assert value == datetime(1970, 1, 1, 0, 0, 10, 1, tzinfo=UTC)


def signed_record() -> recall_pb2.Record:
    salt = bytes(range(32))
    record = recall_pb2.Record(
        stream_id="s",
        seq=1,
        kind=recall_pb2.RECORD_KIND_MESSAGE,
        source_agent_id="planner",
        written_by="agent:planner",
        content="Ship on Friday.",
        tags=["plan", "week"],
        metadata_json='{"priority":1}',
        created_at=Timestamp(seconds=1_767_323_045, nanos=123_456_000),
        idempotency_key="k1",
        content_hash=hashlib.sha256(salt + b"Ship on Friday.").digest(),
        salt=salt,
        role=recall_pb2.PARTICIPANT_ROLE_UNSPECIFIED,
    )
    record.leaf_hash = verify.leaf_hash(record)
    record.chain_hash = verify.chain_hash(b"\x00" * 32, record.leaf_hash)
    return record


def test_a_record_comes_back_to_the_same_bytes_and_still_verifies() -> None:
    wire = signed_record()
    record = recall_convert.record(wire)
    assert (record.kind, record.tags, record.metadata) == (
        cairn.RecordKind.MESSAGE,
        ("plan", "week"),
        {"priority": 1},
    )
    assert record.to_proto().SerializeToString(deterministic=True) == wire.SerializeToString(
        deterministic=True
    )
    assert verify.verify_records([record.to_proto()], b"\x00" * 32) == wire.chain_hash
    assert record.occurred_at is None


def test_a_record_said_before_it_was_written_keeps_that_time_both_ways() -> None:
    wire = signed_record()
    wire.occurred_at.CopyFrom(Timestamp(seconds=1_683_554_160, nanos=654_321_000))
    wire.leaf_hash = verify.leaf_hash(wire)
    wire.chain_hash = verify.chain_hash(b"\x00" * 32, wire.leaf_hash)
    record = recall_convert.record(wire)
    assert record.occurred_at == datetime(2023, 5, 8, 13, 56, 0, 654_321, tzinfo=UTC)
    assert record.to_proto().SerializeToString(deterministic=True) == wire.SerializeToString(
        deterministic=True
    )
    assert verify.verify_records([record.to_proto()], b"\x00" * 32) == wire.chain_hash


def test_a_checkpoint_comes_back_to_the_same_bytes() -> None:
    wire = recall_pb2.Checkpoint(
        tenant="acme",
        stream_id="s",
        size=3,
        root=b"r" * 32,
        chain_head=b"h" * 32,
        time=Timestamp(seconds=1_767_323_045, nanos=5_000),
        key_id="abcd",
        signature=b"sig",
    )
    checkpoint = recall_convert.checkpoint(wire)
    assert checkpoint.to_proto() == wire
    assert verify.checkpoint_bytes(checkpoint.to_proto()) == verify.checkpoint_bytes(wire)


def test_message_builders_set_role_and_fields() -> None:
    call = cairn.ToolCall("call-1", "core_memory_append", '{"label":"human"}')
    assert cairn.Message.user("hi", name="sam") == cairn.Message(
        cairn.MessageRole.USER, "hi", name="sam"
    )
    assert cairn.Message.assistant("", (call,)).tool_calls == (call,)
    tool = cairn.Message.tool("done", tool_call_id="call-1", name="core_memory_append")
    assert state_convert.message_pb(tool) == common_pb2.Message(
        role=common_pb2.MESSAGE_ROLE_TOOL,
        content="done",
        tool_call_id="call-1",
        name="core_memory_append",
    )
    assert call.arguments() == {"label": "human"}


def test_tool_call_arguments_that_are_not_an_object_are_refused() -> None:
    with pytest.raises(ValueError) as caught:
        cairn.ToolCall("call-9", "x", "[1]").arguments()
    assert str(caught.value) == "tool call call-9: arguments are not a JSON object"


def test_a_message_without_a_commit_time_has_none() -> None:
    message = state_convert.message(common_pb2.Message(role=common_pb2.MESSAGE_ROLE_USER))
    assert (message.role, message.created_at) == (cairn.MessageRole.USER, None)


def test_block_metadata_is_a_dict_and_tools_parse_their_schema() -> None:
    pb = state_pb2.Agent(
        id="a",
        tools=[state_pb2.Tool(name="t", parameters_json='{"type":"object"}')],
        memory_mode=state_pb2.MEMORY_MODE_MEMFS,
    )
    pb.metadata.update({"team": "core", "n": 2})
    agent = state_convert.agent(pb)
    assert agent.metadata == {"team": "core", "n": 2.0}
    assert agent.tools == (cairn.Tool("t", "", {"type": "object"}),)
    assert agent.memory_mode is cairn.MemoryMode.MEMFS
    assert state_convert.tool_pb(agent.tools[0]).parameters_json == '{"type": "object"}'


def test_a_memory_tool_success_has_no_error_and_a_refusal_names_it() -> None:
    ok = state_convert.memory_tool_result(state_pb2.ExecuteMemoryToolResponse(ok=True))
    refused = state_convert.memory_tool_result(
        state_pb2.ExecuteMemoryToolResponse(error=state_pb2.MEMORY_TOOL_ERROR_READ_ONLY)
    )
    assert (ok.error, ok.block) == (None, None)
    assert refused.error is cairn.MemoryToolError.READ_ONLY


def test_compiled_context_parses_the_tools_array() -> None:
    context = state_convert.compiled_context(
        state_pb2.CompileContextResponse(
            tools_json='[{"type":"function","function":{"name":"t"}}]',
            status=state_pb2.CONTEXT_STATUS_NEEDS_COMPACTION,
        )
    )
    assert context.tools == ({"type": "function", "function": {"name": "t"}},)
    assert context.status is cairn.ContextStatus.NEEDS_COMPACTION


def test_search_results_are_the_hits_and_say_when_the_vector_lane_was_skipped() -> None:
    hit = recall_pb2.SearchHit(
        record=recall_pb2.Record(stream_id="s", seq=3, content="the lake"),
        score=1.5,
        lexical_rank=1,
        conflicts_with=[recall_pb2.RecordRef(stream_id="s", seq=9)],
    )
    skipped = recall_convert.search_results(
        recall_pb2.SearchResponse(hits=[hit], vector_lane_skipped=True)
    )
    assert skipped.vector_lane_skipped is True
    assert len(skipped) == 1
    assert (skipped[0].record.seq, skipped[0].score) == (3, 1.5)
    assert (skipped[0].lexical_rank, skipped[0].vector_rank) == (1, None)
    assert skipped[0].conflicts_with == (cairn.RecordRef("s", 9),)
    fused = recall_convert.search_results(recall_pb2.SearchResponse(hits=[hit, hit]))
    assert fused.vector_lane_skipped is False and len(fused) == 2
    assert isinstance(fused, list)
