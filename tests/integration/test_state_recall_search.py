"""The search memory tools through a state server and its recall service: what an agent
stored or said comes back by meaning and keywords, narrowed as asked."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from cairn.v1 import state_pb2
from tests.clients import block, recall_client, state_client
from tests.integration.test_state_recall_link import commit_turns, read_all, start_pair, wait_for
from tests.servers import make_key

PASSAGES = [
    ("Sam's cat is called Miso and sleeps on the radiator.", ["pets"]),
    ("The quarterly report is due on the fifth of December.", ["work"]),
    ("Sam takes his coffee black, no sugar.", ["food"]),
]


@pytest.fixture
def pair(server_factory: Any, tmp_path: Path) -> Iterator[tuple[Any, Any]]:
    state_proc, recall_proc, key = start_pair(server_factory, tmp_path)
    assert recall_proc is not None
    with (
        grpc.insecure_channel(state_proc.address) as sc,
        grpc.insecure_channel(recall_proc.address) as rc,
    ):
        yield state_client(sc, key), recall_client(rc, key)


def tool(state: Any, agent_id: str, name: str, **arguments: object) -> tuple[bool, str, int]:
    reply = state.ExecuteMemoryTool(
        state_pb2.ExecuteMemoryToolRequest(
            agent_id=agent_id, tool_name=name, arguments_json=json.dumps(arguments)
        )
    )
    return reply.ok, reply.result, reply.error


def contents(text: str) -> list[str]:
    return [row["content"] for row in json.loads(text)]


def new_agent(state: Any, name: str) -> str:
    request = state_pb2.CreateAgentRequest(name=name, memory_blocks=[block("notes", "")])
    return str(state.CreateAgent(request).agent.id)


def test_archival_search_finds_a_passage_stored_a_moment_ago(pair: tuple[Any, Any]) -> None:
    state, _ = pair
    agent = new_agent(state, "archivist")
    for content, tags in PASSAGES:
        assert tool(state, agent, "archival_memory_insert", content=content, tags=tags)[0]
    ok, text, _ = tool(state, agent, "archival_memory_search", query="cat Miso", top_k=1)
    assert ok
    assert json.loads(text)[0]["content"] == PASSAGES[0][0]
    assert json.loads(text)[0]["tags"] == ["pets"]
    assert len(json.loads(text)) == 1


def test_archival_search_keeps_to_the_tags_asked_for(pair: tuple[Any, Any]) -> None:
    state, _ = pair
    agent = new_agent(state, "tagged")
    for content, tags in PASSAGES:
        tool(state, agent, "archival_memory_insert", content=content, tags=tags)
    ok, text, _ = tool(state, agent, "archival_memory_search", query="Sam", tags=["food", "work"])
    assert ok
    assert sorted(contents(text)) == sorted([PASSAGES[1][0], PASSAGES[2][0]])
    assert contents(text)[0] == PASSAGES[2][0]


def test_a_search_before_anything_was_stored_finds_nothing(pair: tuple[Any, Any]) -> None:
    state, _ = pair
    agent = new_agent(state, "empty")
    assert tool(state, agent, "archival_memory_search", query="cat")[:2] == (
        True,
        "No passages in archival memory match.",
    )
    assert tool(state, agent, "conversation_search", query="cat")[:2] == (
        True,
        "No messages in your conversation history match.",
    )


def test_conversation_search_finds_forwarded_turns_of_the_roles_asked_for(
    pair: tuple[Any, Any],
) -> None:
    state, recall = pair
    agent = new_agent(state, "talker")
    commit_turns(state, agent, 3)
    wait_for(lambda: read_all(recall, f"messages-{agent}"), 6)
    ok, text, _ = tool(state, agent, "conversation_search", query="question 1", limit=1)
    assert ok
    rows = json.loads(text)
    assert [(r["role"], r["content"]) for r in rows] == [("user", "question 1")]
    ok, text, _ = tool(state, agent, "conversation_search", query="lookup", roles=["assistant"])
    assert ok
    assert sorted(contents(text)) == ["[calls lookup({})]"] * 3


def test_unreadable_dates_are_refused_without_searching(pair: tuple[Any, Any]) -> None:
    state, _ = pair
    agent = new_agent(state, "dates")
    assert tool(state, agent, "conversation_search", query="x", start="yesterday") == (
        False,
        "Error: conversation_search: 'start' must be an ISO 8601 date (2026-11-30) or datetime "
        "(2026-11-30T14:00:00Z), not 'yesterday'; nothing was searched.",
        state_pb2.MEMORY_TOOL_ERROR_INVALID_ARGUMENTS,
    )


def test_a_recall_service_taking_client_vectors_is_searched_lexically(
    server_factory: Any, tmp_path: Path
) -> None:
    service_key = make_key(tmp_path, "acme", "service", "state-service")
    recall_proc = server_factory(
        "recall_service", "--embedder", "client", "--embedding-dim", "4", data_dir=tmp_path
    )
    state_proc = server_factory(
        "state_service",
        "--recall-addr",
        recall_proc.address,
        "--recall-keys",
        json.dumps({"acme": service_key}),
        data_dir=tmp_path,
    )
    with grpc.insecure_channel(state_proc.address) as sc:
        state = state_client(sc, make_key(tmp_path, "acme"))
        agent = new_agent(state, "lexical")
        for content, tags in PASSAGES:
            assert tool(state, agent, "archival_memory_insert", content=content, tags=tags)[0]
        for _ in range(2):  # the first search learns the mode, the second starts with it
            ok, text, _ = tool(state, agent, "archival_memory_search", query="coffee sugar")
            # Neighbours match through their indexed context (docs/search.md), below the turn.
            assert (ok, contents(text)[0]) == (True, PASSAGES[2][0])
            assert sorted(contents(text)) == sorted(p[0] for p in PASSAGES)
