"""LettaShared: the shape of Letta's shared conversations, over a real recall server."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import grpc
import pytest

import cairn
from cairn.letta_shared import LettaShared, SharedParticipant
from cairn_server.auth import Role
from tests.servers import ServerProcess, free_port, make_key


@pytest.fixture(scope="module")
def env(
    tmp_path_factory: pytest.TempPathFactory, recall_backend: list[str]
) -> Iterator[tuple[grpc.Channel, dict[str, str]]]:
    data_dir = tmp_path_factory.mktemp("letta-shared")
    server = ServerProcess("recall_service", data_dir, free_port(), recall_backend, {}).start()
    keys = {
        name: make_key(server, "acme", Role.AGENT, name) for name in ("planner", "coder", "critic")
    }
    keys["admin"] = make_key(server, "acme", Role.ADMIN)
    with grpc.insecure_channel(server.address) as channel:
        yield channel, keys
    server.kill()


def as_agent(env: tuple[grpc.Channel, dict[str, str]], shared: LettaShared, name: str) -> Any:
    channel, keys = env
    return LettaShared(channel, shared.stream_id, api_key=keys[name])


def test_agents_share_a_conversation_and_read_only_messages(env: Any) -> None:
    channel, keys = env
    planner = LettaShared.create(channel, api_key=keys["planner"])
    joined = planner.attach("coder")
    assert (joined.agent_id, joined.role, joined.attached_seq) == ("coder", "writer", 2)
    coder = as_agent(env, planner, "coder")
    first = planner.write("Plan: ship on Friday.", tags=["plan"], metadata={"priority": 1})
    coder.write("I'll take the API.")
    planner.write("Good.")
    assert (first.seq, first.author, first.written_by) == (3, "planner", "agent:planner")
    assert (first.tags, first.metadata) == (("plan",), {"priority": 1})

    everything = coder.read()
    assert [(m.seq, m.author, m.content) for m in everything] == [
        (3, "planner", "Plan: ship on Friday."),
        (4, "coder", "I'll take the API."),
        (5, "planner", "Good."),
    ]
    assert [m.content for m in coder.read(limit=2)] == ["I'll take the API.", "Good."]
    assert [m.content for m in planner.read(from_agent="coder")] == ["I'll take the API."]
    assert [(p.agent_id, p.role) for p in planner.list_participants()] == [
        ("planner", "owner"),
        ("coder", "writer"),
    ]
    assert isinstance(planner.list_participants()[0], SharedParticipant)


def test_owner_writes_for_another_participant_and_both_names_are_kept(env: Any) -> None:
    channel, keys = env
    planner = LettaShared.create(channel, api_key=keys["planner"])
    planner.attach("coder")
    relayed = planner.write("Relayed from coder.", source_agent_id="coder")
    assert (relayed.author, relayed.written_by) == ("coder", "agent:planner")
    coder = as_agent(env, planner, "coder")
    with pytest.raises(cairn.PermissionDenied) as denied:
        coder.write("As the planner.", source_agent_id="planner")
    assert denied.value.code is grpc.StatusCode.PERMISSION_DENIED


def test_a_query_finds_the_messages_about_it_including_its_own_last_write(env: Any) -> None:
    channel, keys = env
    planner = LettaShared.create(channel, api_key=keys["planner"])
    planner.attach("coder")
    planner.write("The deploy is scheduled for Friday at noon.")
    planner.write("Lunch is pizza today.", source_agent_id="coder")
    planner.write("Remember to update the deploy checklist.", source_agent_id="coder")
    found = planner.read(query="deploy", limit=5)
    # Hybrid: the two messages naming it, then what the vector lane finds nearest.
    assert [m.content for m in found] == [
        "The deploy is scheduled for Friday at noon.",
        "Remember to update the deploy checklist.",
        "Lunch is pizza today.",
    ]
    assert [m.content for m in planner.read(query="deploy", from_agent="coder", limit=1)] == [
        "Remember to update the deploy checklist."
    ]
    with pytest.raises(ValueError, match="limit must be between 1 and 100 with a query, got 500"):
        planner.read(query="deploy", limit=500)


def test_detached_agent_reads_and_writes_nothing_more(env: Any) -> None:
    channel, keys = env
    planner = LettaShared.create(channel, api_key=keys["planner"])
    planner.attach("critic", role="reader")
    critic = as_agent(env, planner, "critic")
    assert critic.read() == []
    with pytest.raises(cairn.PermissionDenied):
        critic.write("I disagree.")
    planner.detach("critic")
    with pytest.raises(cairn.PermissionDenied):
        critic.read()
    assert [p.agent_id for p in planner.list_participants()] == ["planner"]
    with pytest.raises(ValueError, match="role must be one of reader, writer, owner, got 'boss'"):
        planner.attach("critic", role="boss")


def test_overlapping_writes_within_a_window(env: Any) -> None:
    channel, keys = env
    admin = LettaShared.create(channel, api_key=keys["admin"], owner_agent_id="planner")
    admin.attach("coder")
    admin.write("I'll fix the bug.", source_agent_id="planner")
    admin.write("I'm already on it.", source_agent_id="coder")
    time.sleep(0.3)
    admin.write("Then I'll review.", source_agent_id="planner")
    overlaps = admin.overlapping_writes_within(seconds=0.25)
    assert [(o.earlier.content, o.later.content) for o in overlaps] == [
        ("I'll fix the bug.", "I'm already on it.")
    ]
    assert 0 <= overlaps[0].seconds_apart < 0.25


def test_a_cairn_client_carries_the_key_and_a_channel_needs_one(env: Any) -> None:
    channel, keys = env
    with cairn.Client.from_channels(recall=channel, api_key=keys["planner"]) as client:
        shared = LettaShared.create(client)
        assert shared.client is client
        assert shared.write("Through the client.").author == "planner"
        with pytest.raises(ValueError) as caught:
            LettaShared(client, shared.stream_id, api_key=keys["coder"])
    assert str(caught.value) == "the client carries its own API key: pass api_key to cairn.Client"


def test_read_limit_outside_one_to_a_thousand_is_refused(env: Any) -> None:
    channel, keys = env
    planner = LettaShared.create(channel, api_key=keys["planner"])
    for limit in (0, 1001):
        with pytest.raises(ValueError) as caught:
            planner.read(limit=limit)
        assert str(caught.value) == f"limit must be between 1 and 1000, got {limit}"


def test_a_keyed_write_is_written_once(env: Any) -> None:
    channel, keys = env
    planner = LettaShared.create(channel, api_key=keys["planner"])
    first = planner.write("Once.", idempotency_key="turn-7")
    again = planner.write("Once.", idempotency_key="turn-7")
    assert (first.seq, again.seq) == (2, 2)
    assert [m.content for m in planner.read()] == ["Once."]
