"""The client's request-building layer: the requests it sends, which calls it may retry, and
that every RPC of the contract has a method on both clients."""

from __future__ import annotations

import inspect
import re
from datetime import UTC, datetime, timedelta, timezone

import pytest

import cairn
from cairn import agent_calls, block_calls, memfs_calls, proof_calls, recall_calls, step_calls
from cairn.async_client import AsyncRecallClient, AsyncStateClient
from cairn.client import RecallClient, StateClient
from cairn.v1 import common_pb2, recall_pb2, state_pb2


def snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


@pytest.mark.parametrize(
    ("descriptor", "clients"),
    [
        (state_pb2.DESCRIPTOR.services_by_name["StateService"], (StateClient, AsyncStateClient)),
        (
            recall_pb2.DESCRIPTOR.services_by_name["RecallService"],
            (RecallClient, AsyncRecallClient),
        ),
    ],
)
def test_every_rpc_has_a_method_on_both_clients(
    descriptor: object, clients: tuple[type, type]
) -> None:
    rpcs = [m.name for m in descriptor.methods]  # type: ignore[attr-defined]
    for client in clients:
        missing = [rpc for rpc in rpcs if not hasattr(client, snake(rpc))]
        assert missing == [], f"{client.__name__} lacks methods for {missing}"


def test_sync_and_async_methods_take_the_same_parameters() -> None:
    for sync, aio in ((StateClient, AsyncStateClient), (RecallClient, AsyncRecallClient)):
        names = [n for n in vars(sync) if not n.startswith("_")]
        assert names == [n for n in vars(aio) if not n.startswith("_")]
        for name in names:
            assert vars(sync)[name]._build is vars(aio)[name]._build


def test_methods_show_their_builders_parameters_and_plain_return_types() -> None:
    client = cairn.Client("127.0.0.1:1")
    try:
        assert str(inspect.signature(client.state.get_agent)) == (
            "(agent_id: 'str', *, timeout: 'float | None' = None) -> 'Agent'"
        )
        assert inspect.signature(client.recall.read).return_annotation == "Iterator[Record]"
        assert client.state.get_agent.__doc__ == agent_calls.get_agent.__doc__
        assert client.state.get_agent is client.state.get_agent  # made once per client
    finally:
        client.close()


def test_async_methods_are_coroutine_functions_and_lists_async_iterators() -> None:
    client = cairn.AsyncClient.from_channels()
    assert inspect.iscoroutinefunction(client.state.get_agent)
    assert inspect.signature(client.state.list_agents).return_annotation == ("AsyncIterator[Agent]")


@pytest.mark.parametrize(
    ("call", "idempotent"),
    [
        (agent_calls.get_agent("a"), True),
        (step_calls.compile_context("a"), True),
        (agent_calls.export_agent(["a"]), True),
        (step_calls.commit_step("a", [cairn.Message.user("hi")], base_context_version=1), True),
        (agent_calls.create_agent("a"), False),
        (agent_calls.update_agent("a", name="b"), False),
        (block_calls.update_block("b", value="v", expected_version=3), False),
        (block_calls.delete_block("b"), False),
        (step_calls.execute_memory_tool("a", "memory_rethink", "{}"), False),
        (step_calls.plan_compaction("a"), False),
        (step_calls.apply_compaction("a", "p", "s"), False),
        (memfs_calls.get_memory_file("a", "system/x.md"), True),
        (memfs_calls.commit_memory_files("a", upserts={"x.md": "---\n---\n"}), False),
        (recall_calls.get_stream("s"), True),
        (recall_calls.attach("s", "coder"), True),
        (recall_calls.detach("s", "coder"), False),
        (recall_calls.create_stream(cairn.StreamKind.CONVERSATION, stream_id="s"), False),
        (recall_calls.write("s", "hello"), False),
        (recall_calls.write("s", "hello", idempotency_key="k1"), True),
        (recall_calls.write_batch("s", [cairn.WriteEntry("a", idempotency_key="k1")]), True),
        (
            recall_calls.write_batch(
                "s", [cairn.WriteEntry("a", idempotency_key="k1"), cairn.WriteEntry("b")]
            ),
            False,
        ),
        (recall_calls.write_batch("s", []), False),
        (recall_calls.redact("s", 3), False),
        (proof_calls.get_inclusion_proof("s", 1), True),
        (proof_calls.verify_stream("s"), True),
    ],
)
def test_only_reads_and_keyed_writes_may_be_retried(call: object, idempotent: bool) -> None:
    assert call.idempotent is idempotent  # type: ignore[attr-defined]


def test_commit_step_generates_one_step_id_that_every_attempt_reuses() -> None:
    call = step_calls.commit_step(
        "agent-1",
        [cairn.Message.user("hi"), cairn.Message.assistant("hello")],
        base_context_version=4,
    )
    request = call.request
    assert isinstance(request, state_pb2.CommitStepRequest)
    assert re.fullmatch(r"step-[0-9a-f-]{36}", request.step_id)
    assert [(m.role, m.content) for m in request.messages] == [
        (common_pb2.MESSAGE_ROLE_USER, "hi"),
        (common_pb2.MESSAGE_ROLE_ASSISTANT, "hello"),
    ]
    reply = state_pb2.CommitStepResponse(context_version=5, replayed=True)
    assert call.parse(reply) == cairn.CommittedStep(request.step_id, (), 5, True)


def test_commit_step_keeps_a_given_step_id() -> None:
    call = step_calls.commit_step("a", [], base_context_version=1, step_id="mine")
    assert call.request.step_id == "mine"  # type: ignore[attr-defined]


def test_update_masks_name_exactly_the_fields_given() -> None:
    call = agent_calls.update_agent("agent-1", name="", tags=[], expected_version=7)
    request = call.request
    assert isinstance(request, state_pb2.UpdateAgentRequest)
    assert list(request.update_mask.paths) == ["name", "tags"]
    assert (request.agent.id, request.expected_version) == ("agent-1", 7)
    block = block_calls.update_block("block-1", value="v", read_only=False).request
    assert isinstance(block, state_pb2.UpdateBlockRequest)
    assert list(block.update_mask.paths) == ["value", "read_only"]
    assert not block.HasField("expected_version")


def test_memory_update_mode_reaches_the_update() -> None:
    request = agent_calls.update_agent(
        "a", memory_update_mode=cairn.MemoryUpdateMode.MESSAGE
    ).request
    assert isinstance(request, state_pb2.UpdateAgentRequest)
    assert list(request.update_mask.paths) == ["memory_update_mode"]
    assert request.agent.memory_update_mode == state_pb2.MEMORY_UPDATE_MODE_MESSAGE


def test_memory_tool_arguments_may_be_text_or_a_dict() -> None:
    as_text = step_calls.execute_memory_tool("a", "t", '{"label": "human"}').request
    as_dict = step_calls.execute_memory_tool("a", "t", {"label": "human"}).request
    assert as_text.arguments_json == '{"label": "human"}'  # type: ignore[attr-defined]
    assert as_dict.arguments_json == '{"label":"human"}'  # type: ignore[attr-defined]


def test_read_sends_only_the_filters_given() -> None:
    plain = recall_calls.read("s").page("")
    request = plain.request
    assert isinstance(request, recall_pb2.ReadRequest)
    assert not request.HasField("seqs") and not request.HasField("time_range")
    start = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)
    filtered = recall_calls.read(
        "s", first_seq=3, start=start, source_agent_ids=["coder"], page_size=7
    ).page("tok")
    request = filtered.request
    assert isinstance(request, recall_pb2.ReadRequest)
    assert (request.seqs.first, request.seqs.last) == (3, 0)
    assert (request.time_range.start.seconds, request.time_range.start.nanos) == (
        1767323045,
        678901000,
    )
    assert not request.time_range.HasField("end")
    assert (request.page_token, request.page_size, list(request.source_agent_ids)) == (
        "tok",
        7,
        ["coder"],
    )


def test_naive_times_are_refused() -> None:
    with pytest.raises(ValueError) as caught:
        recall_calls.read("s", start=datetime(2026, 1, 1))
    assert str(caught.value) == "times must be timezone-aware, got naive 2026-01-01T00:00:00"


def test_times_in_other_zones_are_converted_exactly() -> None:
    start = datetime(2026, 1, 1, 1, 0, 0, 1, tzinfo=timezone(timedelta(hours=1)))
    request = step_calls.list_messages("a", start=start).page("").request
    assert isinstance(request, state_pb2.ListMessagesRequest)
    assert (request.time_range.start.seconds, request.time_range.start.nanos) == (
        1767225600,
        1000,
    )


def test_pages_parse_items_and_the_next_token() -> None:
    call = block_calls.list_blocks(label="human", page_size=2).page("")
    reply = state_pb2.ListBlocksResponse(
        blocks=[state_pb2.Block(id="b1", label="human")], next_page_token="next"
    )
    page = call.parse(reply)
    assert ([b.id for b in page.items], page.next_page_token) == (["b1"], "next")
    assert call.idempotent


def test_role_and_kind_strings_are_accepted_as_enum_values() -> None:
    request = recall_calls.attach("s", "coder", cairn.ParticipantRole("owner")).request
    assert request.role == recall_pb2.PARTICIPANT_ROLE_OWNER  # type: ignore[attr-defined]
    request = recall_calls.create_stream(cairn.StreamKind("archival")).request
    assert request.kind == recall_pb2.STREAM_KIND_ARCHIVAL  # type: ignore[attr-defined]


def test_a_client_needs_at_least_one_address() -> None:
    for make in (cairn.Client, cairn.AsyncClient):
        with pytest.raises(ValueError) as caught:
            make(api_key="k")
        assert str(caught.value) == (
            "give the address of the state service, the recall service, or both"
        )
