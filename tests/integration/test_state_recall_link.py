"""The state service with a recall service: messages forwarded, archival memory stored."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import grpc
from google.protobuf import field_mask_pb2

from cairn.v1 import common_pb2, recall_pb2, state_pb2
from tests.clients import block, recall_client, state_client
from tests.servers import ServerProcess, free_port, make_key

USER, ASSISTANT = common_pb2.MESSAGE_ROLE_USER, common_pb2.MESSAGE_ROLE_ASSISTANT


def start_pair(
    server_factory: Any, data_dir: Path, recall_port: int | None = None, start_recall: bool = True
) -> tuple[ServerProcess, ServerProcess | None, str]:
    """A recall server and a state server forwarding to it, sharing keys; returns them and
    an admin key of tenant acme."""
    service_key = make_key(data_dir, "acme", "service", "state-service")
    port = recall_port or free_port()
    recall = server_factory("recall_service", data_dir=data_dir) if start_recall else None
    address = recall.address if recall is not None else f"127.0.0.1:{port}"
    state = server_factory(
        "state_service",
        "--recall-addr",
        address,
        "--recall-keys",
        json.dumps({"acme": service_key}),
        data_dir=data_dir,
    )
    return state, recall, make_key(data_dir, "acme")


def read_all(recall: Any, stream_id: str) -> list[recall_pb2.Record]:
    reply = recall.Read(recall_pb2.ReadRequest(stream_id=stream_id, page_size=1000))
    return list(reply.records)


def wait_for(fetch: Any, count: int, timeout: float = 20.0) -> list[Any]:
    deadline = time.monotonic() + timeout
    while True:
        try:
            found = fetch()
        except grpc.RpcError as error:
            if error.code() is not grpc.StatusCode.NOT_FOUND:
                raise
            found = []
        if len(found) >= count or time.monotonic() > deadline:
            return list(found)
        time.sleep(0.1)


def commit_turns(state: Any, agent_id: str, turns: int) -> list[str]:
    ids: list[str] = []
    version = 1
    for i in range(turns):
        reply = state.CommitStep(
            state_pb2.CommitStepRequest(
                agent_id=agent_id,
                step_id=f"s{i}",
                base_context_version=version,
                messages=[
                    common_pb2.Message(role=USER, content=f"question {i}"),
                    common_pb2.Message(
                        role=ASSISTANT,
                        tool_calls=[
                            common_pb2.ToolCall(id=f"c{i}", name="lookup", arguments_json="{}")
                        ],
                    ),
                ],
            )
        )
        version = reply.context_version
        ids += [m.id for m in reply.messages]
    return ids


def test_committed_messages_reach_the_agents_messages_stream_once(
    server_factory: Any, tmp_path: Path
) -> None:
    state_proc, recall_proc, key = start_pair(server_factory, tmp_path)
    assert recall_proc is not None
    with (
        grpc.insecure_channel(state_proc.address) as sc,
        grpc.insecure_channel(recall_proc.address) as rc,
    ):
        state, recall = state_client(sc, key), recall_client(rc, key)
        agent = state.CreateAgent(state_pb2.CreateAgentRequest(name="fwd")).agent
        ids = commit_turns(state, agent.id, 3)
        stream = f"messages-{agent.id}"
        records = wait_for(lambda: read_all(recall, stream), 6)
        assert [r.idempotency_key for r in records] == ids
        assert [r.content for r in records] == [
            "question 0",
            "[calls lookup({})]",
            "question 1",
            "[calls lookup({})]",
            "question 2",
            "[calls lookup({})]",
        ]
        assert [list(r.tags) for r in records[:2]] == [["role:user"], ["role:assistant"]]
        first = json.loads(records[1].metadata_json)
        assert first["message_id"] == ids[1]
        assert first["tool_calls"] == [{"arguments": "{}", "id": "c0", "name": "lookup"}]
        assert {r.source_agent_id for r in records} == {agent.id}
        # A retried step writes nothing new, here or in recall.
        state.CommitStep(
            state_pb2.CommitStepRequest(
                agent_id=agent.id,
                step_id="s0",
                base_context_version=1,
                messages=[
                    common_pb2.Message(role=USER, content="question 0"),
                    common_pb2.Message(
                        role=ASSISTANT,
                        tool_calls=[
                            common_pb2.ToolCall(id="c0", name="lookup", arguments_json="{}")
                        ],
                    ),
                ],
            )
        )
        time.sleep(1.0)
        assert len(read_all(recall, stream)) == 6


def test_steps_do_not_wait_for_a_recall_service_that_is_down(
    server_factory: Any, tmp_path: Path
) -> None:
    port = free_port()
    state_proc, _, key = start_pair(server_factory, tmp_path, port, start_recall=False)
    with grpc.insecure_channel(state_proc.address) as sc:
        state = state_client(sc, key)
        agent = state.CreateAgent(state_pb2.CreateAgentRequest(name="offline")).agent
        started = time.monotonic()
        ids = commit_turns(state, agent.id, 5)
        assert time.monotonic() - started < 5.0
        time.sleep(1.5)
    recall_proc = ServerProcess("recall_service", tmp_path, port, [], {})
    server_factory_started = recall_proc.start()
    try:
        with grpc.insecure_channel(server_factory_started.address) as rc:
            recall = recall_client(rc, key)
            records = wait_for(lambda: read_all(recall, f"messages-{agent.id}"), 10, 40.0)
            assert [r.idempotency_key for r in records] == ids
            time.sleep(1.0)
            assert len(read_all(recall, f"messages-{agent.id}")) == 10
    finally:
        recall_proc.kill()


def test_archival_memory_insert_stores_in_the_archival_stream(
    server_factory: Any, tmp_path: Path
) -> None:
    state_proc, recall_proc, key = start_pair(server_factory, tmp_path)
    assert recall_proc is not None
    with (
        grpc.insecure_channel(state_proc.address) as sc,
        grpc.insecure_channel(recall_proc.address) as rc,
    ):
        state, recall = state_client(sc, key), recall_client(rc, key)
        agent = state.CreateAgent(
            state_pb2.CreateAgentRequest(name="archivist", memory_blocks=[block("notes", "")])
        ).agent
        reply = state.ExecuteMemoryTool(
            state_pb2.ExecuteMemoryToolRequest(
                agent_id=agent.id,
                tool_name="archival_memory_insert",
                arguments_json=json.dumps(
                    {"content": "Sam's cat is called Miso.", "tags": ["cat"]}
                ),
            )
        )
        assert (reply.ok, reply.result) == (
            True,
            "Stored the passage in archival memory (record 2 of your archival stream).",
        )
        records = read_all(recall, f"archival-{agent.id}")
        assert [(r.content, list(r.tags), r.source_agent_id) for r in records] == [
            ("Sam's cat is called Miso.", ["cat"], agent.id)
        ]
        state.UpdateAgent(
            state_pb2.UpdateAgentRequest(
                agent=state_pb2.Agent(id=agent.id, system="You archive."),
                update_mask=field_mask_pb2.FieldMask(paths=["system"]),
            )
        )
        prompt = state.CompileContext(state_pb2.CompileContextRequest(agent_id=agent.id))
        assert "- 1 total memories you created are stored in archival memory" in (
            prompt.system_prompt
        )


def test_tenants_without_a_recall_key_are_not_forwarded(
    server_factory: Any, tmp_path: Path
) -> None:
    state_proc, recall_proc, _ = start_pair(server_factory, tmp_path)
    assert recall_proc is not None
    other = make_key(tmp_path, "globex")
    with grpc.insecure_channel(state_proc.address) as sc:
        state = state_client(sc, other)
        agent = state.CreateAgent(state_pb2.CreateAgentRequest(name="local-only")).agent
        commit_turns(state, agent.id, 1)
        reply = state.ExecuteMemoryTool(
            state_pb2.ExecuteMemoryToolRequest(
                agent_id=agent.id,
                tool_name="archival_memory_insert",
                arguments_json='{"content": "x"}',
            )
        )
        assert (reply.ok, reply.error) == (False, state_pb2.MEMORY_TOOL_ERROR_RECALL_NOT_CONFIGURED)
    with grpc.insecure_channel(recall_proc.address) as rc:
        recall = recall_client(rc, other)
        time.sleep(1.0)
        listed = recall.ListStreams(recall_pb2.ListStreamsRequest())
        assert list(listed.streams) == []
