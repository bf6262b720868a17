"""The state service over real gRPC, against a server process on a free port."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import field_mask_pb2
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from cairn.v1 import state_pb2
from tests.clients import block, rpc_error, state_client
from tests.servers import ServerProcess, free_port, key_store, make_key


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory, state_backend: list[str]
) -> Iterator[ServerProcess]:
    data_dir = tmp_path_factory.mktemp("state")
    proc = ServerProcess(
        "state_service", data_dir, free_port(), ["--max-message-bytes", "65536", *state_backend], {}
    ).start()
    yield proc
    proc.kill()


@pytest.fixture(scope="module")
def channel(server: ServerProcess) -> Iterator[grpc.Channel]:
    with grpc.insecure_channel(server.address) as ch:
        yield ch


@pytest.fixture(scope="module")
def admin(server: ServerProcess, channel: grpc.Channel) -> Any:
    return state_client(channel, make_key(server, "acme"))


@pytest.fixture(scope="module")
def other_tenant(server: ServerProcess, channel: grpc.Channel) -> Any:
    return state_client(channel, make_key(server, "globex"))


def mask(*paths: str) -> field_mask_pb2.FieldMask:
    return field_mask_pb2.FieldMask(paths=list(paths))


def shared_pair(admin: Any) -> tuple[state_pb2.Block, state_pb2.Agent, state_pb2.Agent]:
    human = admin.CreateBlock(
        state_pb2.CreateBlockRequest(block=block("human", "Name: Sam", description="The user"))
    ).block
    one = admin.CreateAgent(
        state_pb2.CreateAgentRequest(
            name="one",
            system="You are One.\n{CORE_MEMORY}",
            memory_blocks=[block("persona", "I am One.")],
            block_ids=[human.id],
        )
    ).agent
    two = admin.CreateAgent(
        state_pb2.CreateAgentRequest(name="two", system="You are Two.", block_ids=[human.id])
    ).agent
    return human, one, two


def compile_(client: Any, agent_id: str) -> state_pb2.CompileContextResponse:
    reply: state_pb2.CompileContextResponse = client.CompileContext(
        state_pb2.CompileContextRequest(agent_id=agent_id)
    )
    return reply


# --- the walkthrough ----------------------------------------------------------------------


def test_shared_block_edit_changes_both_prompts(admin: Any) -> None:
    human, one, two = shared_pair(admin)
    before_one = compile_(admin, one.id)
    before_two = compile_(admin, two.id)
    assert "<human>\n<description>\nThe user\n</description>" in before_one.system_prompt
    assert "<value>\nName: Sam\n</value>" in before_two.system_prompt

    updated = admin.UpdateBlock(
        state_pb2.UpdateBlockRequest(
            block=state_pb2.Block(id=human.id, value="Name: Sam. Prefers tea."),
            update_mask=mask("value"),
            expected_version=1,
        )
    )
    assert updated.block.version == 2
    assert list(updated.affected_agent_ids) == [one.id, two.id]
    assert list(updated.rebuilt_agent_ids) == [one.id, two.id]

    for agent_id, before in ((one.id, before_one), (two.id, before_two)):
        after = compile_(admin, agent_id)
        assert after.cache_hit is True
        assert after.memory_revision == str(int(before.memory_revision) + 1)
        assert after.prompt_hash != before.prompt_hash
        assert "<value>\nName: Sam. Prefers tea.\n</value>" in after.system_prompt
        assert "- chars_current=23\n" in after.system_prompt
    assert compile_(admin, one.id).system_prompt.startswith(
        "You are One.\n<memory_blocks>\nThe following memory blocks are currently engaged"
    )
    assert compile_(admin, two.id).system_prompt.startswith("You are Two.\n\n<memory_blocks>")


def test_get_agent_returns_everything_needed_to_rebuild_it(admin: Any) -> None:
    rule = state_pb2.ToolRule(type=state_pb2.TOOL_RULE_TYPE_EXIT_LOOP, tool_name="send_message")
    created = admin.CreateAgent(
        state_pb2.CreateAgentRequest(
            name="full",
            system="S",
            model="gpt-x",
            context_window=8000,
            memory_blocks=[block("persona", "p", read_only=True, limit=50)],
            tools=[
                state_pb2.Tool(
                    name="send_message",
                    description="Send",
                    parameters_json='{"type":"object","properties":{"m":{"type":"string"}}}',
                )
            ],
            tool_rules=[rule],
            tags=["prod"],
            memory_mode=state_pb2.MEMORY_MODE_LINE_NUMBERED,
        )
    ).agent
    fetched = admin.GetAgent(state_pb2.GetAgentRequest(agent_id=created.id)).agent
    assert fetched == created
    assert fetched.model == "gpt-x"
    assert fetched.context_window == 8000
    assert fetched.blocks[0].read_only is True
    assert fetched.tools[0].name == "send_message"
    assert fetched.tool_rules[0] == rule
    assert fetched.memory_mode == state_pb2.MEMORY_MODE_LINE_NUMBERED
    prompt = compile_(admin, created.id).system_prompt
    assert "1→ p\n" in prompt
    assert "<tool_rule>\nsend_message ends your response (yields control) when called" in prompt


def test_update_agent_with_field_mask(admin: Any) -> None:
    agent = admin.CreateAgent(state_pb2.CreateAgentRequest(name="before", system="old")).agent
    reply = admin.UpdateAgent(
        state_pb2.UpdateAgentRequest(
            agent=state_pb2.Agent(id=agent.id, name="after", system="new", model="ignored"),
            update_mask=mask("name", "system"),
            expected_version=agent.version,
        )
    )
    assert reply.prompt_rebuilt is True
    assert reply.agent.name == "after"
    assert reply.agent.model == ""
    assert reply.agent.version == agent.version + 1
    assert compile_(admin, agent.id).system_prompt.startswith("new\n\n<memory_metadata>")
    stale = rpc_error(
        admin.UpdateAgent,
        state_pb2.UpdateAgentRequest(
            agent=state_pb2.Agent(id=agent.id, name="x"),
            update_mask=mask("name"),
            expected_version=agent.version,
        ),
    )
    assert stale.code() is grpc.StatusCode.ABORTED


def test_delete_agent_keeps_its_blocks(admin: Any) -> None:
    human, one, two = shared_pair(admin)
    admin.DeleteAgent(state_pb2.DeleteAgentRequest(agent_id=one.id))
    gone = rpc_error(admin.GetAgent, state_pb2.GetAgentRequest(agent_id=one.id))
    assert gone.code() is grpc.StatusCode.NOT_FOUND
    assert admin.GetBlock(state_pb2.GetBlockRequest(block_id=human.id)).block.value == "Name: Sam"
    reply = admin.UpdateBlock(
        state_pb2.UpdateBlockRequest(
            block=state_pb2.Block(id=human.id, value="x"), update_mask=mask("value")
        )
    )
    assert list(reply.affected_agent_ids) == [two.id]


def test_list_blocks_filters_by_label_and_tags(admin: Any) -> None:
    label = "lst_" + free_port().__str__()
    for i in range(5):
        admin.CreateBlock(
            state_pb2.CreateBlockRequest(block=block(label, str(i), tags=["a"] if i % 2 else []))
        )
    first = admin.ListBlocks(state_pb2.ListBlocksRequest(label=label, page_size=2))
    second = admin.ListBlocks(
        state_pb2.ListBlocksRequest(label=label, page_size=2, page_token=first.next_page_token)
    )
    third = admin.ListBlocks(
        state_pb2.ListBlocksRequest(label=label, page_size=2, page_token=second.next_page_token)
    )
    values = [b.value for r in (first, second, third) for b in r.blocks]
    assert values == ["0", "1", "2", "3", "4"]
    assert third.next_page_token == ""
    tagged = admin.ListBlocks(state_pb2.ListBlocksRequest(label=label, tags=["a"]))
    assert [b.value for b in tagged.blocks] == ["1", "3"]


# --- WatchAgent ---------------------------------------------------------------------------


def test_watch_agent_delivers_block_update_and_rebuild(admin: Any) -> None:
    human, one, _ = shared_pair(admin)
    stream = admin.WatchAgent(state_pb2.WatchAgentRequest(agent_id=one.id), timeout=20)
    received: list[state_pb2.WatchAgentResponse] = []
    started = threading.Event()
    done = threading.Event()

    def consume() -> None:
        for event in stream:
            received.append(event)
            if event.type == state_pb2.EVENT_TYPE_WATCH_STARTED:
                started.set()
            if event.type == state_pb2.EVENT_TYPE_PROMPT_REBUILT:
                done.set()
                return

    thread = threading.Thread(target=consume, daemon=True)
    thread.start()
    assert started.wait(10)
    admin.UpdateBlock(
        state_pb2.UpdateBlockRequest(
            block=state_pb2.Block(id=human.id, value="changed"), update_mask=mask("value")
        )
    )
    assert done.wait(10)
    stream.cancel()
    kinds = [e.type for e in received]
    assert kinds == [
        state_pb2.EVENT_TYPE_WATCH_STARTED,
        state_pb2.EVENT_TYPE_BLOCK_UPDATED,
        state_pb2.EVENT_TYPE_PROMPT_REBUILT,
    ]
    assert received[0].memory_revision == "1"
    assert received[1].block_id == human.id
    assert received[1].memory_revision == "2"
    assert received[2].prompt_hash == compile_(admin, one.id).prompt_hash


def test_watch_of_unknown_agent_is_not_found(admin: Any) -> None:
    stream = admin.WatchAgent(state_pb2.WatchAgentRequest(agent_id="agent-nope"), timeout=10)
    error = rpc_error(lambda: next(iter(stream)))
    assert error.code() is grpc.StatusCode.NOT_FOUND


# --- concurrency --------------------------------------------------------------------------


def test_concurrent_updates_with_same_expected_version_one_wins(admin: Any) -> None:
    human, _, _ = shared_pair(admin)
    n = 16

    def attempt(i: int) -> tuple[str, grpc.StatusCode | None]:
        try:
            admin.UpdateBlock(
                state_pb2.UpdateBlockRequest(
                    block=state_pb2.Block(id=human.id, value=f"writer {i}"),
                    update_mask=mask("value"),
                    expected_version=1,
                )
            )
            return f"writer {i}", None
        except grpc.RpcError as error:
            return f"writer {i}", error.code()

    with ThreadPoolExecutor(n) as pool:
        results = list(pool.map(attempt, range(n)))
    winners = [value for value, code in results if code is None]
    assert len(winners) == 1
    assert sorted(str(code) for _, code in results if code is not None) == [
        str(grpc.StatusCode.ABORTED)
    ] * (n - 1)
    final = admin.GetBlock(state_pb2.GetBlockRequest(block_id=human.id)).block
    assert final.value == winners[0]
    assert final.version == 2


# --- authentication and tenants -----------------------------------------------------------


def test_missing_key_is_unauthenticated(channel: grpc.Channel) -> None:
    client = state_client(channel, None)
    error = rpc_error(client.ListAgents, state_pb2.ListAgentsRequest())
    assert error.code() is grpc.StatusCode.UNAUTHENTICATED
    assert error.details() == "missing 'authorization: Bearer <api key>' metadata"


def test_unknown_key_is_unauthenticated(channel: grpc.Channel) -> None:
    client = state_client(channel, "ck_000000000000_forged")
    error = rpc_error(client.ListAgents, state_pb2.ListAgentsRequest())
    assert error.code() is grpc.StatusCode.UNAUTHENTICATED
    assert error.details() == "unknown API key"


def test_malformed_key_is_unauthenticated(channel: grpc.Channel) -> None:
    client = state_client(channel, "sk-something")
    error = rpc_error(client.ListAgents, state_pb2.ListAgentsRequest())
    assert error.code() is grpc.StatusCode.UNAUTHENTICATED
    assert error.details() == "malformed API key: Cairn keys start with 'ck_'"


def test_revoked_key_is_unauthenticated(server: ServerProcess, channel: grpc.Channel) -> None:
    from cairn_server.auth import revoke_key

    key = make_key(server, "acme")
    key_id = key.split("_")[1]
    store = key_store(server)
    revoke_key(store, key_id)
    store.close()
    error = rpc_error(state_client(channel, key).ListAgents, state_pb2.ListAgentsRequest())
    assert error.code() is grpc.StatusCode.UNAUTHENTICATED
    assert error.details() == f"API key '{key_id}' has been revoked"


def test_other_tenant_gets_not_found_and_sees_nothing(admin: Any, other_tenant: Any) -> None:
    human, one, _ = shared_pair(admin)
    for call, request in (
        (other_tenant.GetAgent, state_pb2.GetAgentRequest(agent_id=one.id)),
        (other_tenant.CompileContext, state_pb2.CompileContextRequest(agent_id=one.id)),
        (other_tenant.GetBlock, state_pb2.GetBlockRequest(block_id=human.id)),
        (other_tenant.DeleteAgent, state_pb2.DeleteAgentRequest(agent_id=one.id)),
        (
            other_tenant.UpdateBlock,
            state_pb2.UpdateBlockRequest(
                block=state_pb2.Block(id=human.id, value="stolen"), update_mask=mask("value")
            ),
        ),
        (
            other_tenant.CreateAgent,
            state_pb2.CreateAgentRequest(name="thief", block_ids=[human.id]),
        ),
    ):
        error = rpc_error(call, request)
        assert error.code() is grpc.StatusCode.NOT_FOUND, call
    listed = other_tenant.ListAgents(state_pb2.ListAgentsRequest(page_size=1000))
    assert one.id not in [a.id for a in listed.agents]
    assert admin.GetBlock(state_pb2.GetBlockRequest(block_id=human.id)).block.value == "Name: Sam"


def test_agent_key_acts_only_for_its_own_agent(
    server: ServerProcess, channel: grpc.Channel, admin: Any
) -> None:
    human, one, two = shared_pair(admin)
    agent_client = state_client(channel, make_key(server, "acme", "agent", one.id))
    assert compile_(agent_client, one.id).system_prompt == compile_(admin, one.id).system_prompt
    error = rpc_error(agent_client.CompileContext, state_pb2.CompileContextRequest(agent_id=two.id))
    assert error.code() is grpc.StatusCode.PERMISSION_DENIED
    assert error.details() == (
        f"agent '{one.id}' of tenant 'acme' may not compile agent '{two.id}': an agent key acts "
        "only for the agent named by its subject"
    )
    denied = rpc_error(agent_client.CreateAgent, state_pb2.CreateAgentRequest(name="x"))
    assert denied.code() is grpc.StatusCode.PERMISSION_DENIED
    reply = agent_client.UpdateBlock(
        state_pb2.UpdateBlockRequest(
            block=state_pb2.Block(id=human.id, value="edited by one"), update_mask=mask("value")
        )
    )
    assert reply.block.version == 2


def test_health_needs_no_key(channel: grpc.Channel) -> None:
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    stub: Any = health_pb2_grpc.HealthStub(channel)
    reply = stub.Check(health_pb2.HealthCheckRequest(service="cairn.v1.StateService"))
    assert reply.status == health_pb2.HealthCheckResponse.SERVING


def test_reflection_lists_the_services(channel: grpc.Channel) -> None:
    from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

    stub: Any = reflection_pb2_grpc.ServerReflectionStub(channel)
    replies = stub.ServerReflectionInfo(
        iter([reflection_pb2.ServerReflectionRequest(list_services="")])
    )
    names = sorted(s.name for s in next(iter(replies)).list_services_response.service)
    assert names == [
        "cairn.v1.StateService",
        "grpc.health.v1.Health",
        "grpc.reflection.v1alpha.ServerReflection",
    ]


# --- bad input: each gets a specific status and changes nothing -----------------------------


def field_violation(error: grpc.RpcError) -> tuple[str, str]:
    status = rpc_status.from_call(error)  # type: ignore[arg-type]
    assert status is not None
    detail = error_details_pb2.BadRequest()
    assert status.details[0].Unpack(detail)
    violation = detail.field_violations[0]
    return violation.field, violation.description


def count_blocks(client: Any) -> int:
    total, token = 0, ""
    while True:
        page = client.ListBlocks(state_pb2.ListBlocksRequest(page_size=1000, page_token=token))
        total += len(page.blocks)
        token = page.next_page_token
        if not token:
            return total


def test_empty_label_is_refused(admin: Any) -> None:
    before = count_blocks(admin)
    error = rpc_error(admin.CreateBlock, state_pb2.CreateBlockRequest(block=block("", "v")))
    assert error.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert error.details() == "block.label: must not be empty"
    assert field_violation(error) == ("block.label", "must not be empty")
    assert count_blocks(admin) == before


@pytest.mark.parametrize("label", ["my label", "<x>", "1st", "a/b", "x" * 101])
def test_non_tag_safe_label_is_refused(admin: Any, label: str) -> None:
    before = count_blocks(admin)
    error = rpc_error(admin.CreateBlock, state_pb2.CreateBlockRequest(block=block(label)))
    assert error.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert error.details() == (
        f"block.label: {label!r} is not tag-safe: use 1-100 characters of [A-Za-z0-9_-], "
        "starting with a letter or underscore"
    )
    assert count_blocks(admin) == before


def test_duplicate_label_on_one_agent_is_refused(admin: Any) -> None:
    before = admin.ListAgents(state_pb2.ListAgentsRequest(page_size=1000))
    error = rpc_error(
        admin.CreateAgent,
        state_pb2.CreateAgentRequest(name="dup", memory_blocks=[block("human"), block("human")]),
    )
    assert error.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert error.details() == "memory_blocks: label 'human' is used by two blocks of one agent"
    after = admin.ListAgents(state_pb2.ListAgentsRequest(page_size=1000))
    assert len(after.agents) == len(before.agents)

    human, one, _ = shared_pair(admin)
    twin = admin.CreateBlock(state_pb2.CreateBlockRequest(block=block("human"))).block
    attach = rpc_error(
        admin.AttachBlock, state_pb2.AttachBlockRequest(agent_id=one.id, block_id=twin.id)
    )
    assert attach.code() is grpc.StatusCode.ALREADY_EXISTS
    assert attach.details() == f"agent '{one.id}' already has a block labelled 'human'"
    assert [b.id for b in admin.GetAgent(state_pb2.GetAgentRequest(agent_id=one.id)).agent.blocks][
        1
    ] == human.id


def test_value_longer_than_limit_is_refused(admin: Any) -> None:
    error = rpc_error(
        admin.CreateBlock, state_pb2.CreateBlockRequest(block=block("h", "x" * 11, limit=10))
    )
    assert error.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert error.details() == (
        "block.value: is 11 characters, longer than the block's limit of 10 (by 1)"
    )
    created = admin.CreateBlock(
        state_pb2.CreateBlockRequest(block=block("h", "ok", limit=10))
    ).block
    error = rpc_error(
        admin.UpdateBlock,
        state_pb2.UpdateBlockRequest(
            block=state_pb2.Block(id=created.id, value="y" * 25), update_mask=mask("value")
        ),
    )
    assert error.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert field_violation(error) == (
        "block.value",
        "is 25 characters, longer than the block's limit of 10 (by 15)",
    )
    after = admin.GetBlock(state_pb2.GetBlockRequest(block_id=created.id)).block
    assert (after.value, after.version) == ("ok", 1)


def test_limit_below_current_value_is_refused(admin: Any) -> None:
    created = admin.CreateBlock(
        state_pb2.CreateBlockRequest(block=block("h", "twelve chars", limit=100))
    ).block
    error = rpc_error(
        admin.UpdateBlock,
        state_pb2.UpdateBlockRequest(
            block=state_pb2.Block(id=created.id, limit=5), update_mask=mask("limit")
        ),
    )
    assert error.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert error.details() == "block.limit: 5 is below the current value's length of 12"
    after = admin.GetBlock(state_pb2.GetBlockRequest(block_id=created.id)).block
    assert (after.limit, after.version) == (100, 1)


@pytest.mark.parametrize(
    ("method", "request_", "message"),
    [
        ("GetAgent", state_pb2.GetAgentRequest(agent_id="agent-x"), "agent 'agent-x' not found"),
        ("GetBlock", state_pb2.GetBlockRequest(block_id="block-x"), "block 'block-x' not found"),
        (
            "UpdateBlock",
            state_pb2.UpdateBlockRequest(
                block=state_pb2.Block(id="block-x", value="v"),
                update_mask=field_mask_pb2.FieldMask(paths=["value"]),
            ),
            "block 'block-x' not found",
        ),
        (
            "CreateAgent",
            state_pb2.CreateAgentRequest(name="n", block_ids=["block-x"]),
            "block 'block-x' not found",
        ),
        (
            "CompileContext",
            state_pb2.CompileContextRequest(agent_id="agent-x"),
            "agent 'agent-x' not found",
        ),
        (
            "DeleteBlock",
            state_pb2.DeleteBlockRequest(block_id="block-x"),
            "block 'block-x' not found",
        ),
    ],
)
def test_unknown_ids_are_not_found(admin: Any, method: str, request_: Any, message: str) -> None:
    error = rpc_error(getattr(admin, method), request_)
    assert error.code() is grpc.StatusCode.NOT_FOUND
    assert error.details() == message


@pytest.mark.parametrize("size", [-1, 1001, 5000])
def test_page_size_outside_range_is_refused(admin: Any, size: int) -> None:
    for request in (
        state_pb2.ListAgentsRequest(page_size=size),
        state_pb2.ListBlocksRequest(page_size=size),
    ):
        call = (
            admin.ListAgents
            if isinstance(request, state_pb2.ListAgentsRequest)
            else (admin.ListBlocks)
        )
        error = rpc_error(call, request)
        assert error.code() is grpc.StatusCode.INVALID_ARGUMENT
        assert error.details() == f"page_size: must be between 1 and 1000, got {size}"


def test_garbage_page_token_is_refused(admin: Any) -> None:
    error = rpc_error(admin.ListAgents, state_pb2.ListAgentsRequest(page_token="garbage!"))
    assert error.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert error.details() == "page_token: is not a token this server issued"


def test_unknown_field_mask_path_is_refused(admin: Any) -> None:
    created = admin.CreateBlock(state_pb2.CreateBlockRequest(block=block("h", "v"))).block
    error = rpc_error(
        admin.UpdateBlock,
        state_pb2.UpdateBlockRequest(
            block=state_pb2.Block(id=created.id, value="new"), update_mask=mask("value", "colour")
        ),
    )
    assert error.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert error.details() == (
        "update_mask: unknown or read-only field 'colour'; updatable: description, hidden, "
        "label, limit, metadata, read_only, tags, value"
    )
    read_only = rpc_error(
        admin.UpdateBlock,
        state_pb2.UpdateBlockRequest(
            block=state_pb2.Block(id=created.id, version=9), update_mask=mask("version")
        ),
    )
    assert read_only.code() is grpc.StatusCode.INVALID_ARGUMENT
    agent_error = rpc_error(
        admin.UpdateAgent,
        state_pb2.UpdateAgentRequest(
            agent=state_pb2.Agent(id="agent-x", name="n"), update_mask=mask("memory_revision")
        ),
    )
    assert agent_error.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert admin.GetBlock(state_pb2.GetBlockRequest(block_id=created.id)).block.value == "v"


def test_empty_field_mask_is_refused(admin: Any) -> None:
    created = admin.CreateBlock(state_pb2.CreateBlockRequest(block=block("h", "v"))).block
    error = rpc_error(
        admin.UpdateBlock,
        state_pb2.UpdateBlockRequest(block=state_pb2.Block(id=created.id, value="new")),
    )
    assert error.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert error.details() == "update_mask: must name at least one field to update"


def test_request_larger_than_maximum_is_refused_and_server_keeps_serving(admin: Any) -> None:
    before = count_blocks(admin)
    error = rpc_error(
        admin.CreateBlock,
        state_pb2.CreateBlockRequest(block=block("big", "x" * 70_000, limit=100_000)),
    )
    assert error.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
    assert count_blocks(admin) == before
    assert admin.CreateBlock(state_pb2.CreateBlockRequest(block=block("small"))).block.id


def test_bad_tool_schema_is_refused(admin: Any) -> None:
    error = rpc_error(
        admin.CreateAgent,
        state_pb2.CreateAgentRequest(
            name="t", tools=[state_pb2.Tool(name="f", parameters_json="{not json")]
        ),
    )
    assert error.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert error.details() == (
        "tools[0].parameters_json: is not valid JSON: Expecting property name enclosed in "
        "double quotes at 1"
    )


def test_detach_reorder_and_delete_with_force(admin: Any) -> None:
    human, one, two = shared_pair(admin)
    persona_id = one.blocks[0].id
    reordered = admin.ReorderBlocks(
        state_pb2.ReorderBlocksRequest(agent_id=one.id, block_ids=[human.id, persona_id])
    ).agent
    assert [b.label for b in reordered.blocks] == ["human", "persona"]
    bad = rpc_error(
        admin.ReorderBlocks, state_pb2.ReorderBlocksRequest(agent_id=one.id, block_ids=[human.id])
    )
    assert bad.code() is grpc.StatusCode.INVALID_ARGUMENT
    attached = rpc_error(admin.DeleteBlock, state_pb2.DeleteBlockRequest(block_id=human.id))
    assert attached.code() is grpc.StatusCode.FAILED_PRECONDITION
    assert attached.details() == (
        f"block '{human.id}' is attached to 2 agent(s) ({one.id}, {two.id}); detach it first "
        "or pass force=true"
    )
    detached = admin.DeleteBlock(state_pb2.DeleteBlockRequest(block_id=human.id, force=True))
    assert list(detached.detached_agent_ids) == [one.id, two.id]
    assert "<human>" not in compile_(admin, two.id).system_prompt


# --- restart and shutdown -----------------------------------------------------------------


def test_restart_keeps_every_agent_and_block(
    server_factory: Any, tmp_path: Path, state_backend: list[str]
) -> None:
    proc = server_factory("state_service", *state_backend)
    key = make_key(proc, "acme")
    with grpc.insecure_channel(proc.address) as ch:
        client = state_client(ch, key)
        human, one, two = shared_pair(client)
        client.UpdateBlock(
            state_pb2.UpdateBlockRequest(
                block=state_pb2.Block(id=human.id, value="after edit"), update_mask=mask("value")
            )
        )
        agents_before = [
            client.GetAgent(state_pb2.GetAgentRequest(agent_id=a)).agent for a in (one.id, two.id)
        ]
        prompts_before = [compile_(client, a).system_prompt for a in (one.id, two.id)]
    assert proc.stop() == 0
    proc.start()
    with grpc.insecure_channel(proc.address) as ch:
        client = state_client(ch, key)
        agents_after = [
            client.GetAgent(state_pb2.GetAgentRequest(agent_id=a)).agent for a in (one.id, two.id)
        ]
        assert agents_after == agents_before
        assert [compile_(client, a).system_prompt for a in (one.id, two.id)] == prompts_before


def test_sigterm_lets_in_flight_calls_finish(server_factory: Any, state_backend: list[str]) -> None:
    proc = server_factory("state_service", *state_backend)
    key = make_key(proc, "acme")
    with grpc.insecure_channel(proc.address) as ch:
        client = state_client(ch, key)
        human = client.CreateBlock(state_pb2.CreateBlockRequest(block=block("h"))).block
        for i in range(300):
            client.CreateAgent(state_pb2.CreateAgentRequest(name=f"a{i}", block_ids=[human.id]))
        future = client._stub.UpdateBlock.future(
            state_pb2.UpdateBlockRequest(
                block=state_pb2.Block(id=human.id, value="fan-out"), update_mask=mask("value")
            ),
            metadata=[("authorization", f"Bearer {key}")],
            timeout=30,
        )
        proc.proc.send_signal(15)
        reply = future.result()
        assert len(reply.rebuilt_agent_ids) == 300
    assert proc.proc.wait(30) == 0
    assert '"msg": "stopped"' in proc.log()


def test_insecure_local_is_refused_off_loopback(tmp_path: Path) -> None:
    import subprocess
    import sys

    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "state_service",
            "--insecure-local",
            "--host",
            "0.0.0.0",
            "--port",
            str(free_port()),
            "--data-dir",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == 2
    assert (
        "--insecure-local serves without authentication and is only allowed on a loopback "
        "address; refusing to bind '0.0.0.0'" in result.stderr
    )


def test_insecure_local_serves_without_key_and_warns(server_factory: Any) -> None:
    proc = server_factory("state_service", "--insecure-local")
    with grpc.insecure_channel(proc.address) as ch:
        client = state_client(ch, None)
        agent = client.CreateAgent(state_pb2.CreateAgentRequest(name="local")).agent
        assert agent.name == "local"
    assert "serving WITHOUT authentication" in proc.log()
