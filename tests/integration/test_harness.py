"""The reference harness against a scripted OpenAI-compatible endpoint and a real server."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import grpc
import pytest

import cairn
from cairn.harness import SUMMARY_PROMPT, Harness
from cairn.v1 import common_pb2, state_pb2
from tests.clients import block, state_client
from tests.servers import ServerProcess, free_port, make_key

Reply = dict[str, Any]


class ScriptedModel:
    """An OpenAI-compatible `/v1/chat/completions` that answers from a script."""

    def __init__(self, respond: Callable[[dict[str, Any]], Reply]) -> None:
        self.requests: list[dict[str, Any]] = []
        model = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                model.requests.append(body)
                reply = json.dumps({"choices": [{"message": respond(body)}]}).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()


def tool_call(name: str, **arguments: Any) -> Reply:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": f"call-{name}",
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(arguments)},
            }
        ],
    }


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    proc = ServerProcess("state_service", tmp_path_factory.mktemp("harness"), free_port(), [], {})
    yield proc.start()
    proc.kill()


@pytest.fixture(scope="module")
def channel(server: ServerProcess) -> Iterator[grpc.Channel]:
    with grpc.insecure_channel(server.address) as ch:
        yield ch


@pytest.fixture(scope="module")
def key(server: ServerProcess) -> str:
    return make_key(server, "acme")


def test_tool_calls_edit_memory_and_the_step_is_committed(channel: grpc.Channel, key: str) -> None:
    admin = state_client(channel, key)
    human = admin.CreateBlock(state_pb2.CreateBlockRequest(block=block("human", "Name: Sam"))).block
    agent = admin.CreateAgent(
        state_pb2.CreateAgentRequest(name="a", system="You help.", block_ids=[human.id])
    ).agent
    other = admin.CreateAgent(state_pb2.CreateAgentRequest(name="b", block_ids=[human.id])).agent
    script = iter(
        [
            tool_call("core_memory_append", label="human", content="Likes tea"),
            {"role": "assistant", "content": "Noted: you like tea."},
        ]
    )
    model = ScriptedModel(lambda body: next(script))
    try:
        client = cairn.Client.from_channels(state=channel, api_key=key)
        harness = Harness(client, base_url=model.url, model="m")
        result = harness.run_turn(agent.id, "I love tea.")
    finally:
        model.close()
    assert result.reply == "Noted: you like tea."
    assert (result.steps, result.tool_calls, result.finished) == (2, ["core_memory_append"], True)
    first, second = model.requests
    assert first["messages"][-1] == {"role": "user", "content": "I love tea."}
    assert [t["function"]["name"] for t in first["tools"]][:2] == [
        "core_memory_append",
        "core_memory_replace",
    ]
    assert "<value>\nName: Sam\n</value>" in first["messages"][0]["content"]
    assert "<value>\nName: Sam\nLikes tea\n</value>" in second["messages"][0]["content"]
    assert second["messages"][-1]["role"] == "tool"
    assert second["messages"][-1]["content"].startswith(
        "The core memory block with label `human` has been edited."
    )
    window = admin.CompileContext(state_pb2.CompileContextRequest(agent_id=agent.id))
    assert [(m.role, m.content) for m in window.messages] == [
        (common_pb2.MESSAGE_ROLE_USER, "I love tea."),
        (common_pb2.MESSAGE_ROLE_ASSISTANT, ""),
        (common_pb2.MESSAGE_ROLE_TOOL, second["messages"][-1]["content"]),
        (common_pb2.MESSAGE_ROLE_ASSISTANT, "Noted: you like tea."),
    ]
    assert window.messages[1].tool_calls[0].name == "core_memory_append"
    shared = admin.CompileContext(state_pb2.CompileContextRequest(agent_id=other.id))
    assert "<value>\nName: Sam\nLikes tea\n</value>" in shared.system_prompt


def test_hundreds_of_turns_through_compaction_lose_nothing(channel: grpc.Channel, key: str) -> None:
    admin = state_client(channel, key)
    probe = admin.CreateAgent(state_pb2.CreateAgentRequest(name="probe")).agent
    base = admin.CompileContext(state_pb2.CompileContextRequest(agent_id=probe.id)).tokens.total
    agent = admin.CreateAgent(
        state_pb2.CreateAgentRequest(
            name="long", context_window=base + 1500, memory_blocks=[block("notes", "")]
        )
    ).agent
    summaries = 0

    def respond(body: dict[str, Any]) -> Reply:
        nonlocal summaries
        if body["messages"][0]["content"] == SUMMARY_PROMPT:
            summaries += 1
            return {"role": "assistant", "content": f"Summary {summaries}: the user counted up."}
        last = body["messages"][-1]["content"]
        return {"role": "assistant", "content": f"You said: {last}"}

    model = ScriptedModel(respond)
    turns = 200
    try:
        harness = Harness(channel, api_key=key, base_url=model.url, model="m")
        compactions = 0
        for i in range(turns):
            result = harness.run_turn(agent.id, f"number {i}, and some words to fill the window")
            assert result.reply == f"You said: number {i}, and some words to fill the window"
            compactions += result.compactions
    finally:
        model.close()
    assert compactions == summaries >= 3
    users: list[str] = []
    token = ""
    while True:
        page = admin.ListMessages(
            state_pb2.ListMessagesRequest(
                agent_id=agent.id,
                roles=[common_pb2.MESSAGE_ROLE_USER],
                page_size=1000,
                page_token=token,
            )
        )
        users += [m.content for m in page.messages]
        token = page.next_page_token
        if not token:
            break
    assert users == [f"number {i}, and some words to fill the window" for i in range(turns)]
    window = admin.CompileContext(state_pb2.CompileContextRequest(agent_id=agent.id))
    assert window.status == state_pb2.CONTEXT_STATUS_OK
    assert window.messages[0].role == common_pb2.MESSAGE_ROLE_SUMMARY
    assert window.messages[-1].content == (
        f"You said: number {turns - 1}, and some words to fill the window"
    )
    assert f"Summary {summaries}:" in window.messages[0].content


def test_a_client_brings_its_own_key(channel: grpc.Channel, key: str) -> None:
    client = cairn.Client.from_channels(state=channel, api_key=key)
    with pytest.raises(ValueError) as caught:
        Harness(client, api_key=key, base_url="http://127.0.0.1:9/v1", model="m")
    assert str(caught.value) == "the client carries its own API key: pass api_key to cairn.Client"
