"""Steps, the message window, memory tools, compaction and portability over real gRPC."""

from __future__ import annotations

import json
import random
import threading
import time
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from google.protobuf import field_mask_pb2

from cairn.v1 import common_pb2, state_pb2
from tests.clients import block, rpc_error, state_client
from tests.servers import ServerProcess, free_port, make_key

USER, ASSISTANT, TOOL = (
    common_pb2.MESSAGE_ROLE_USER,
    common_pb2.MESSAGE_ROLE_ASSISTANT,
    common_pb2.MESSAGE_ROLE_TOOL,
)


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory, state_backend: list[str]
) -> Iterator[ServerProcess]:
    proc = ServerProcess(
        "state_service", tmp_path_factory.mktemp("steps"), free_port(), state_backend, {}
    )
    yield proc.start()
    proc.kill()


@pytest.fixture(scope="module")
def admin(server: ServerProcess) -> Iterator[Any]:
    with grpc.insecure_channel(server.address) as channel:
        yield state_client(channel, make_key(server, "acme"))


def msg(role: common_pb2.MessageRole.ValueType, content: str = "", **kw: Any) -> common_pb2.Message:
    return common_pb2.Message(role=role, content=content, **kw)


def new_agent(client: Any, **kw: Any) -> state_pb2.Agent:
    kw.setdefault("name", "agent")
    kw.setdefault("memory_blocks", [block("human", "Name: Sam", limit=100)])
    agent: state_pb2.Agent = client.CreateAgent(state_pb2.CreateAgentRequest(**kw)).agent
    return agent


def compile_(client: Any, agent_id: str) -> state_pb2.CompileContextResponse:
    reply: state_pb2.CompileContextResponse = client.CompileContext(
        state_pb2.CompileContextRequest(agent_id=agent_id)
    )
    return reply


def commit(
    client: Any, agent_id: str, step_id: str, *messages: common_pb2.Message, base: int | None = None
) -> state_pb2.CommitStepResponse:
    if base is None:
        base = compile_(client, agent_id).context_version
    reply: state_pb2.CommitStepResponse = client.CommitStep(
        state_pb2.CommitStepRequest(
            agent_id=agent_id, step_id=step_id, base_context_version=base, messages=messages
        )
    )
    return reply


def history(client: Any, agent_id: str) -> list[common_pb2.Message]:
    reply = client.ListMessages(state_pb2.ListMessagesRequest(agent_id=agent_id, page_size=1000))
    return list(reply.messages)


def turn(client: Any, agent_id: str, step_id: str, text: str) -> state_pb2.CommitStepResponse:
    return commit(client, agent_id, step_id, msg(USER, text), msg(ASSISTANT, f"re: {text}"))


# --- steps --------------------------------------------------------------------------------


def test_commit_step_appends_to_window_and_history(admin: Any) -> None:
    agent = new_agent(admin)
    before = compile_(admin, agent.id)
    assert before.context_version == 1
    assert list(before.messages) == []
    call = common_pb2.ToolCall(id="c1", name="lookup", arguments_json='{"q": "x"}')
    reply = commit(
        admin,
        agent.id,
        "step-1",
        msg(USER, "hello"),
        msg(ASSISTANT, "", tool_calls=[call]),
        msg(TOOL, "42", tool_call_id="c1", name="lookup"),
        msg(ASSISTANT, "The answer is 42."),
    )
    assert reply.context_version == 2
    assert reply.replayed is False
    assert [m.step_id for m in reply.messages] == ["step-1"] * 4
    after = compile_(admin, agent.id)
    assert after.context_version == 2
    assert [(m.role, m.content) for m in after.messages] == [
        (USER, "hello"),
        (ASSISTANT, ""),
        (TOOL, "42"),
        (ASSISTANT, "The answer is 42."),
    ]
    assert after.messages[1].tool_calls[0] == call
    assert [m.id for m in after.messages] == [m.id for m in reply.messages]
    assert after.tokens.messages > 0
    assert after.tokens.total == after.tokens.system + after.tokens.tools + after.tokens.messages
    fetched = admin.GetAgent(state_pb2.GetAgentRequest(agent_id=agent.id)).agent
    assert list(fetched.message_ids)[1:] == [m.id for m in reply.messages]
    listed = history(admin, agent.id)
    assert listed[0].role == common_pb2.MESSAGE_ROLE_SYSTEM
    assert listed[0].content == after.system_prompt
    assert [m.id for m in listed[1:]] == [m.id for m in reply.messages]


def test_prompt_view_leaves_out_the_compiled_memory(admin: Any) -> None:
    agent = new_agent(admin)
    full = compile_(admin, agent.id)
    prompt = admin.CompileContext(
        state_pb2.CompileContextRequest(agent_id=agent.id, view=state_pb2.CONTEXT_VIEW_PROMPT)
    )
    assert full.compiled_memory in full.system_prompt
    assert prompt.compiled_memory == ""
    prompt.compiled_memory = full.compiled_memory
    assert prompt == full


def test_retried_step_returns_the_first_result_and_writes_nothing(admin: Any) -> None:
    agent = new_agent(admin)
    first = turn(admin, agent.id, "s1", "hi")
    again = commit(admin, agent.id, "s1", msg(USER, "hi"), msg(ASSISTANT, "re: hi"), base=1)
    assert again.replayed is True
    assert [m.id for m in again.messages] == [m.id for m in first.messages]
    assert again.context_version == first.context_version == 2
    assert len(history(admin, agent.id)) == 3
    assert compile_(admin, agent.id).context_version == 2


def test_reused_step_id_with_other_messages_is_refused(admin: Any) -> None:
    agent = new_agent(admin)
    turn(admin, agent.id, "s1", "hi")
    error = rpc_error(commit, admin, agent.id, "s1", msg(USER, "other"), base=2)
    assert error.code() is grpc.StatusCode.ALREADY_EXISTS
    assert error.details() == (
        f"step 's1' of agent '{agent.id}' was committed with different messages; use a new "
        "step_id for a new step"
    )
    assert len(history(admin, agent.id)) == 3


def test_stale_base_context_version_is_aborted_and_writes_nothing(admin: Any) -> None:
    agent = new_agent(admin)
    turn(admin, agent.id, "s1", "one")
    error = rpc_error(commit, admin, agent.id, "s2", msg(USER, "two"), base=1)
    assert error.code() is grpc.StatusCode.ABORTED
    assert error.details() == (
        f"agent '{agent.id}' window is at version 2, not the base_context_version 1 this step "
        "was computed from; compile the context again"
    )
    assert len(history(admin, agent.id)) == 3
    assert compile_(admin, agent.id).context_version == 2


@pytest.mark.parametrize(
    ("messages", "details"),
    [
        ([], "messages: a step needs at least one message"),
        (
            [msg(USER, "ok"), msg(TOOL, "no call id")],
            "messages[1].tool_call_id: a tool message must name its call",
        ),
        (
            [msg(USER, "ok"), msg(common_pb2.MESSAGE_ROLE_SUMMARY, "sneaky")],
            "messages[1].role: a step holds system, user, assistant and tool messages, not summary",
        ),
        (
            [msg(common_pb2.MESSAGE_ROLE_UNSPECIFIED, "no role")],
            "messages[0].role: must be set to a known role",
        ),
        (
            [msg(ASSISTANT, "", tool_calls=[common_pb2.ToolCall(name="f")])],
            "messages[0].tool_calls[0]: a tool call needs an id and a name",
        ),
    ],
)
def test_bad_step_writes_nothing(
    admin: Any, messages: list[common_pb2.Message], details: str
) -> None:
    agent = new_agent(admin)
    error = rpc_error(commit, admin, agent.id, "bad", *messages, base=1)
    assert error.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert error.details() == details
    assert len(history(admin, agent.id)) == 1
    assert compile_(admin, agent.id).context_version == 1


def test_list_messages_filters_by_role_and_time_and_pages(admin: Any) -> None:
    agent = new_agent(admin)
    for i in range(5):
        turn(admin, agent.id, f"s{i}", f"q{i}")
    users = admin.ListMessages(
        state_pb2.ListMessagesRequest(agent_id=agent.id, roles=[USER], page_size=2)
    )
    contents = [m.content for m in users.messages]
    token = users.next_page_token
    while token:
        page = admin.ListMessages(
            state_pb2.ListMessagesRequest(
                agent_id=agent.id, roles=[USER], page_size=2, page_token=token
            )
        )
        contents += [m.content for m in page.messages]
        token = page.next_page_token
    assert contents == ["q0", "q1", "q2", "q3", "q4"]
    newest = admin.ListMessages(
        state_pb2.ListMessagesRequest(agent_id=agent.id, newest_first=True, page_size=1)
    )
    assert [m.content for m in newest.messages] == ["re: q4"]
    everything = history(admin, agent.id)
    cutoff = everything[5].created_at
    later = admin.ListMessages(
        state_pb2.ListMessagesRequest(
            agent_id=agent.id, time_range=common_pb2.TimeRange(start=cutoff)
        )
    )
    assert [m.id for m in later.messages] == [m.id for m in everything[5:]]


# --- memory tools -------------------------------------------------------------------------


def run_tool(
    client: Any, agent_id: str, name: str, args: Any
) -> state_pb2.ExecuteMemoryToolResponse:
    text = args if isinstance(args, str) else json.dumps(args)
    reply: state_pb2.ExecuteMemoryToolResponse = client.ExecuteMemoryTool(
        state_pb2.ExecuteMemoryToolRequest(agent_id=agent_id, tool_name=name, arguments_json=text)
    )
    return reply


def test_memory_tool_edit_of_a_shared_block_reaches_the_other_agent(admin: Any) -> None:
    human = admin.CreateBlock(state_pb2.CreateBlockRequest(block=block("human", "Name: Sam"))).block
    one = new_agent(admin, name="one", memory_blocks=[], block_ids=[human.id])
    two = new_agent(admin, name="two", memory_blocks=[], block_ids=[human.id])
    before = compile_(admin, two.id)
    reply = run_tool(
        admin, one.id, "core_memory_append", {"label": "human", "content": "Likes tea"}
    )
    assert reply.ok is True
    assert reply.result == (
        "The core memory block with label `human` has been edited. Review the changes and make "
        "sure they are as expected (correct indentation, no duplicate lines, etc). Edit the "
        "memory block again if necessary."
    )
    assert reply.block.value == "Name: Sam\nLikes tea"
    assert list(reply.rebuilt_agent_ids) == [one.id, two.id]
    after = compile_(admin, two.id)
    assert after.memory_revision == str(int(before.memory_revision) + 1)
    assert "<value>\nName: Sam\nLikes tea\n</value>" in after.system_prompt


REFUSALS = [
    (
        "core_memory_append",
        {"label": "persona", "content": "x"},
        state_pb2.MEMORY_TOOL_ERROR_READ_ONLY,
        "Error: the memory block `persona` is read-only and cannot be edited; nothing was changed.",
    ),
    (
        "memory_rethink",
        {"label": "nope", "new_memory": "x"},
        state_pb2.MEMORY_TOOL_ERROR_UNKNOWN_LABEL,
        "Error: there is no memory block labelled `nope`; nothing was changed. Existing labels: "
        "human, persona.",
    ),
    (
        "core_memory_replace",
        {"label": "human", "old_content": "Bob", "new_content": "x"},
        state_pb2.MEMORY_TOOL_ERROR_TEXT_NOT_FOUND,
        "Error: old_content 'Bob' does not occur in the memory block `human`; nothing was "
        "changed. Copy the text exactly as it appears in the block.",
    ),
    (
        "memory_replace",
        {"label": "human", "old_string": "Likes", "new_string": "x"},
        state_pb2.MEMORY_TOOL_ERROR_AMBIGUOUS,
        "Error: old_string 'Likes' occurs 2 times in the memory block `human` (lines 2, 3); "
        "nothing was changed. Include more of the surrounding text so that it occurs exactly "
        "once.",
    ),
    (
        "memory_replace",
        {"label": "human", "old_string": "1→ Name: Sam", "new_string": "x"},
        state_pb2.MEMORY_TOOL_ERROR_LINE_NUMBER_PREFIX,
        "Error: the argument 'old_string' of memory_replace contains line-number prefixes "
        "(like '1→ '), which are only shown to help you find lines; nothing was changed. Call "
        "the tool again without them.",
    ),
    (
        "memory_insert",
        {"label": "human", "new_string": "x", "insert_line": 7},
        state_pb2.MEMORY_TOOL_ERROR_INSERT_LINE_OUT_OF_RANGE,
        "Error: insert_line 7 is outside the memory block `human`, which has 3 lines; nothing "
        "was changed. Use 0 to insert at the beginning and 3 or -1 to insert at the end.",
    ),
    (
        "core_memory_append",
        {"label": "human", "content": "x" * 40},
        state_pb2.MEMORY_TOOL_ERROR_LIMIT_EXCEEDED,
        "Error: the edit would make the memory block `human` 73 characters long, 13 over its "
        "limit of 60; nothing was changed. Shorten the text or remove something first.",
    ),
    (
        "core_memory_append",
        '{"label": "human", ',
        state_pb2.MEMORY_TOOL_ERROR_INVALID_ARGUMENTS,
        "Error: the arguments of core_memory_append are not valid JSON (Expecting property "
        "name enclosed in double quotes at position 19); nothing was changed. Call "
        "core_memory_append again with a JSON object.",
    ),
    (
        "memory_replace",
        {"label": "human", "old_string": "Sam"},
        state_pb2.MEMORY_TOOL_ERROR_INVALID_ARGUMENTS,
        "Error: memory_replace needs the argument 'new_string' (string); nothing was changed.",
    ),
    (
        "archival_memory_search",
        {"query": "tea"},
        state_pb2.MEMORY_TOOL_ERROR_RECALL_NOT_CONFIGURED,
        "Error: archival_memory_search needs the recall service, which is not configured on "
        "this server; nothing was stored or searched.",
    ),
]


@pytest.mark.parametrize(("tool", "args", "error", "text"), REFUSALS)
def test_memory_tool_refusal_has_its_text_and_changes_nothing(
    admin: Any, tool: str, args: Any, error: int, text: str
) -> None:
    agent = new_agent(
        admin,
        memory_blocks=[
            block("human", "Name: Sam\nLikes: tea\nLikes: cake", limit=60),
            block("persona", "I help.", read_only=True),
        ],
    )
    before = compile_(admin, agent.id)
    blocks_before = admin.GetAgent(state_pb2.GetAgentRequest(agent_id=agent.id)).agent.blocks
    reply = run_tool(admin, agent.id, tool, args)
    assert (reply.ok, reply.error, reply.result) == (False, error, text)
    assert reply.memory_revision == before.memory_revision
    after = compile_(admin, agent.id)
    assert after.system_prompt == before.system_prompt
    assert after.memory_revision == before.memory_revision
    assert admin.GetAgent(state_pb2.GetAgentRequest(agent_id=agent.id)).agent.blocks == (
        blocks_before
    )


def test_tool_schemas_list_the_agents_tools_then_the_memory_tools(admin: Any) -> None:
    agent = new_agent(
        admin,
        tools=[state_pb2.Tool(name="send_message", description="Reply", parameters_json="{}")],
    )
    tools = json.loads(compile_(admin, agent.id).tools_json)
    names = [t["function"]["name"] for t in tools]
    assert names == [
        "send_message",
        "core_memory_append",
        "core_memory_replace",
        "memory_replace",
        "memory_insert",
        "memory_rethink",
        "memory_finish_edits",
        "archival_memory_insert",
        "archival_memory_search",
        "conversation_search",
    ]
    assert all(t["type"] == "function" for t in tools)
    shadow = rpc_error(
        admin.CreateAgent,
        state_pb2.CreateAgentRequest(name="x", tools=[state_pb2.Tool(name="memory_replace")]),
    )
    assert shadow.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert shadow.details() == (
        "tools[0].name: 'memory_replace' is a built-in memory tool and cannot be redefined"
    )


# --- MESSAGE mode -------------------------------------------------------------------------


def test_message_mode_sends_the_update_until_a_step_acknowledges_it(admin: Any) -> None:
    agent = new_agent(admin, memory_update_mode=state_pb2.MEMORY_UPDATE_MODE_MESSAGE)
    first = compile_(admin, agent.id)
    run_tool(admin, agent.id, "core_memory_append", {"label": "human", "content": "Likes tea"})
    pending = compile_(admin, agent.id)
    assert pending.system_prompt == first.system_prompt
    assert pending.memory_revision == "2"
    assert pending.memory_update.startswith('<memory_update revision="2">\n')
    assert "Likes tea" in pending.memory_update
    assert pending.tokens.total > pending.tokens.system + pending.tokens.tools
    assert compile_(admin, agent.id).memory_update == pending.memory_update
    admin.CommitStep(
        state_pb2.CommitStepRequest(
            agent_id=agent.id,
            step_id="s1",
            base_context_version=pending.context_version,
            messages=[msg(USER, "hi"), msg(ASSISTANT, "hello")],
            acknowledged_memory_revision="2",
        )
    )
    after = compile_(admin, agent.id)
    assert after.memory_update == ""
    assert after.system_prompt == first.system_prompt
    assert "Likes tea" in after.compiled_memory


# --- context accounting -------------------------------------------------------------------


def test_system_prompt_larger_than_window_is_a_stop_reason(admin: Any) -> None:
    agent = new_agent(admin, context_window=50)
    reply = compile_(admin, agent.id)
    assert reply.status == state_pb2.CONTEXT_STATUS_CONTEXT_WINDOW_OVERFLOW_IN_SYSTEM_PROMPT
    assert reply.tokens.system > 50


def base_tokens(client: Any) -> int:
    """Tokens of a fresh agent's context: system prompt and tool schemas."""
    return compile_(client, new_agent(client).id).tokens.total


def test_context_above_threshold_needs_compaction(admin: Any) -> None:
    window = int(base_tokens(admin) / 0.8)
    agent = new_agent(admin, context_window=window)
    assert compile_(admin, agent.id).status == state_pb2.CONTEXT_STATUS_OK
    turn(admin, agent.id, "s1", "word " * (window // 5))
    reply = compile_(admin, agent.id)
    assert reply.tokens.total > 0.9 * window
    assert reply.status == state_pb2.CONTEXT_STATUS_NEEDS_COMPACTION


# --- compaction ---------------------------------------------------------------------------


def test_compaction_round_trip_keeps_evicted_messages_in_history(admin: Any) -> None:
    window = base_tokens(admin) * 2
    agent = new_agent(admin, context_window=window)
    for i in range(6):
        turn(admin, agent.id, f"s{i}", f"question {i} " + "blah " * (window // 20))
    before = compile_(admin, agent.id)
    plan = admin.PlanCompaction(
        state_pb2.PlanCompactionRequest(agent_id=agent.id, target_share=0.7)
    )
    assert plan.base_context_version == before.context_version
    assert plan.tokens_before == before.tokens.total
    evicted = [m.id for m in plan.messages]
    assert evicted == [m.id for m in before.messages[: len(evicted)]]
    assert plan.messages[-1].role == ASSISTANT
    assert plan.tokens_after <= int(0.7 * before.tokens.context_window)
    applied = admin.ApplyCompaction(
        state_pb2.ApplyCompactionRequest(
            agent_id=agent.id, plan_id=plan.plan_id, summary="Six questions about blah."
        )
    )
    assert applied.summary_message.role == common_pb2.MESSAGE_ROLE_SUMMARY
    after = compile_(admin, agent.id)
    assert after.context_version == before.context_version + 1 == applied.context_version
    assert [m.id for m in after.messages] == [applied.summary_message.id] + [
        m.id for m in before.messages[len(evicted) :]
    ]
    assert after.tokens.total < before.tokens.total
    assert f"- {len(evicted)} previous messages between you and the user" in after.system_prompt
    all_ids = [m.id for m in history(admin, agent.id)]
    assert set(evicted) <= set(all_ids)
    again = rpc_error(
        admin.ApplyCompaction,
        state_pb2.ApplyCompactionRequest(agent_id=agent.id, plan_id=plan.plan_id, summary="x"),
    )
    assert again.code() is grpc.StatusCode.FAILED_PRECONDITION
    assert again.details() == f"compaction plan '{plan.plan_id}' was already applied"


def test_compaction_after_the_window_moved_is_aborted(admin: Any) -> None:
    window = base_tokens(admin) * 2
    agent = new_agent(admin, context_window=window)
    for i in range(4):
        turn(admin, agent.id, f"s{i}", "blah " * (window // 20))
    plan = admin.PlanCompaction(state_pb2.PlanCompactionRequest(agent_id=agent.id))
    turn(admin, agent.id, "late", "one more")
    error = rpc_error(
        admin.ApplyCompaction,
        state_pb2.ApplyCompactionRequest(agent_id=agent.id, plan_id=plan.plan_id, summary="x"),
    )
    assert error.code() is grpc.StatusCode.ABORTED
    assert error.details() == (
        f"agent '{agent.id}' window moved from version {plan.base_context_version} to "
        f"{plan.base_context_version + 1} since the plan; plan the compaction again"
    )


def test_compaction_below_target_is_refused(admin: Any) -> None:
    agent = new_agent(admin)
    turn(admin, agent.id, "s1", "hi")
    context = compile_(admin, agent.id)
    error = rpc_error(admin.PlanCompaction, state_pb2.PlanCompactionRequest(agent_id=agent.id))
    assert error.code() is grpc.StatusCode.FAILED_PRECONDITION
    assert error.details() == (
        f"agent '{agent.id}' uses {context.tokens.total} tokens, already at or below the "
        f"target of 64000 (50% of 128000); nothing to compact"
    )


# --- portability --------------------------------------------------------------------------


def test_export_import_round_trip_into_a_fresh_server(
    admin: Any, server_factory: Any, state_backend: list[str]
) -> None:
    shared = admin.CreateBlock(
        state_pb2.CreateBlockRequest(block=block("human", "Name: Sam", description="user"))
    ).block
    rule = state_pb2.ToolRule(type=state_pb2.TOOL_RULE_TYPE_EXIT_LOOP, tool_name="send_message")
    one = new_agent(
        admin,
        name="one",
        memory_blocks=[block("persona", "I am one.", read_only=True)],
        block_ids=[shared.id],
        tool_rules=[rule],
        memory_mode=state_pb2.MEMORY_MODE_LINE_NUMBERED,
    )
    two = new_agent(admin, name="two", memory_blocks=[], block_ids=[shared.id])
    turn(admin, one.id, "s1", "hello")
    exported = admin.ExportAgent(state_pb2.ExportAgentRequest(agent_ids=[one.id, two.id]))
    document = json.loads(exported.agent_file_json)
    assert document["format"] == "cairn.agent-file"
    assert [b["label"] for b in document["blocks"]] == ["persona", "human"]
    assert [len(a["messages"]) for a in document["agents"]] == [2, 0]

    fresh = server_factory()
    with grpc.insecure_channel(fresh.address) as channel:
        other = state_client(channel, make_key(fresh, "acme"))
        imported = other.ImportAgent(
            state_pb2.ImportAgentRequest(agent_file_json=exported.agent_file_json)
        )
        new_one, new_two = imported.agents
        assert imported.id_map[one.id] == new_one.id != one.id
        assert imported.id_map[shared.id] == new_one.blocks[1].id == new_two.blocks[0].id
        for old, new in ((one, new_one), (two, new_two)):
            assert (
                compile_(other, new.id).compiled_memory == compile_(admin, old.id).compiled_memory
            )
        assert [m.content for m in compile_(other, new_one.id).messages] == ["hello", "re: hello"]
        other.UpdateBlock(
            state_pb2.UpdateBlockRequest(
                block=state_pb2.Block(id=new_two.blocks[0].id, value="Name: Ann"),
                update_mask=field_mask_pb2.FieldMask(paths=["value"]),
            )
        )
        assert "Name: Ann" in compile_(other, new_one.id).system_prompt


@pytest.mark.parametrize(
    ("document", "details"),
    [
        ("not json", "agent_file_json: is not valid JSON: Expecting value"),
        (
            '{"format": "letta"}',
            "agent_file_json: is not an agent file (format 'cairn.agent-file')",
        ),
        (
            '{"format": "cairn.agent-file", "version": 9, "agents": []}',
            "agent_file_json: has version 9; this server reads version 1",
        ),
        (
            '{"format": "cairn.agent-file", "version": 1, "agents": [{"id": "a", "name": "x", '
            '"block_ids": ["missing"]}]}',
            "agent_file_json.agents.0.block_ids: names no block of the file: 'missing'",
        ),
    ],
)
def test_bad_agent_file_is_refused(admin: Any, document: str, details: str) -> None:
    before = len(admin.ListAgents(state_pb2.ListAgentsRequest(page_size=1000)).agents)
    error = rpc_error(admin.ImportAgent, state_pb2.ImportAgentRequest(agent_file_json=document))
    assert error.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert error.details() == details
    assert len(admin.ListAgents(state_pb2.ListAgentsRequest(page_size=1000)).agents) == before


# --- crash --------------------------------------------------------------------------------


def test_sigkill_mid_stream_keeps_every_acknowledged_step_and_no_partial_one(
    server_factory: Any, state_backend: list[str]
) -> None:
    proc = server_factory("state_service", *state_backend)
    key = make_key(proc, "acme")
    acknowledged: list[tuple[str, list[str]]] = []
    attempted: list[str] = []
    stop = threading.Event()
    with grpc.insecure_channel(proc.address) as channel:
        client = state_client(channel, key)
        agent = new_agent(client)

        def writer() -> None:
            version = 1
            i = 0
            while not stop.is_set():
                step = f"s{i}"
                attempted.append(step)
                messages = [msg(USER, f"u{i}"), msg(ASSISTANT, f"a{i}"), msg(USER, f"v{i}")]
                try:
                    reply = commit(client, agent.id, step, *messages, base=version)
                except grpc.RpcError:
                    return
                version = reply.context_version
                acknowledged.append((step, [m.content for m in reply.messages]))
                i += 1

        thread = threading.Thread(target=writer)
        thread.start()
        time.sleep(random.uniform(0.8, 1.5))
        proc.kill()
        stop.set()
        thread.join(10)
    assert len(acknowledged) > 10
    proc.start()
    with grpc.insecure_channel(proc.address) as channel:
        client = state_client(channel, key)
        window = compile_(client, agent.id)
        contents = [m.content for m in window.messages]
        steps = [m.step_id for m in window.messages]
    assert len(contents) % 3 == 0, "a step was half applied"
    committed = [steps[i] for i in range(0, len(steps), 3)]
    assert committed[: len(acknowledged)] == [step for step, _ in acknowledged]
    assert len(committed) in (len(acknowledged), len(acknowledged) + 1)
    for index, step in enumerate(committed):
        n = int(step[1:])
        assert contents[3 * index : 3 * index + 3] == [f"u{n}", f"a{n}", f"v{n}"]
    assert window.context_version == len(committed) + 1
