"""A fleet on one PostgreSQL: two state processes and two recall processes, one client
spreading its calls across them (issue: scale-out). Recall's own replica test
(test_recall_replicas.py) adds the SIGKILL of a recall process mid-stream."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest

import cairn
from cairn import verify
from cairn.protobuf_values import to_timestamp
from cairn.v1 import recall_pb2
from tests.servers import ServerProcess, free_port, make_key


@dataclass
class Fleet:
    states: list[ServerProcess]
    recalls: list[ServerProcess]
    key: str

    def client(self, i: int) -> cairn.Client:
        """A client whose state calls go to state process i and recall calls to recall i."""
        return cairn.Client(self.states[i].address, self.recalls[i].address, api_key=self.key)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory, postgres_url: str) -> Iterator[Fleet]:
    schema = f"fleet_{uuid.uuid4().hex[:10]}"
    db = ["--database-url", postgres_url, "--database-schema", schema]
    data_dir: Path = tmp_path_factory.mktemp("fleet")
    recalls = [
        ServerProcess("recall_service", data_dir, free_port(), db, {}).start() for _ in range(2)
    ]
    service_key = make_key(recalls[0], "acme", "service", "state-service")
    states = [
        ServerProcess(
            "state_service",
            tmp_path_factory.mktemp(f"state{i}"),
            free_port(),
            [
                *db,
                "--recall-addr",
                recalls[i].address,
                "--recall-keys",
                json.dumps({"acme": service_key}),
            ],
            {},
        ).start()
        for i in range(2)
    ]
    yield Fleet(states, recalls, make_key(recalls[0], "acme"))
    for server in [*states, *recalls]:
        server.kill()
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'.encode())


def test_a_shared_block_edit_through_one_replica_reaches_prompts_compiled_by_the_other(
    fleet: Fleet,
) -> None:
    with fleet.client(0) as a, fleet.client(1) as b:
        human = a.state.create_block("human", "Name: Sam")
        one = a.state.create_agent("one", block_ids=[human.id])
        two = b.state.create_agent("two", block_ids=[human.id])
        assert "Name: Sam\n</value>" in b.state.compile_context(one.id).system_prompt
        update = a.state.update_block(human.id, value="Name: Sam. Prefers tea.")
        assert update.rebuilt_agent_ids == (one.id, two.id)
        for agent_id in (one.id, two.id):
            context = b.state.compile_context(agent_id)
            assert "<value>\nName: Sam. Prefers tea.\n</value>" in context.system_prompt
            assert context.cache_hit is True


def test_watch_on_one_replica_sees_a_block_update_made_through_the_other(fleet: Fleet) -> None:
    with fleet.client(0) as a, fleet.client(1) as b:
        human = a.state.create_block("human", "x")
        agent = a.state.create_agent("watched", block_ids=[human.id])
        seen: list[cairn.AgentEvent] = []
        started = threading.Event()
        rebuilt = threading.Event()
        events = b.state.watch_agent(agent.id)

        def consume() -> None:
            for event in events:
                seen.append(event)
                if event.type is cairn.EventType.WATCH_STARTED:
                    started.set()
                if event.type is cairn.EventType.PROMPT_REBUILT:
                    rebuilt.set()
                    return

        thread = threading.Thread(target=consume, daemon=True)
        thread.start()
        assert started.wait(10)
        a.state.update_block(human.id, value="changed through replica 0")
        assert rebuilt.wait(10)
        events.close()
        assert [e.type for e in seen] == [
            cairn.EventType.WATCH_STARTED,
            cairn.EventType.BLOCK_UPDATED,
            cairn.EventType.PROMPT_REBUILT,
        ]
        assert seen[1].block_id == human.id


def test_two_replicas_updating_with_one_expected_version_give_one_winner(fleet: Fleet) -> None:
    with fleet.client(0) as a, fleet.client(1) as b:
        human = a.state.create_block("human", "v1")
        outcomes: list[str] = []
        barrier = threading.Barrier(8)

        def attempt(client: cairn.Client, i: int) -> None:
            barrier.wait()
            try:
                client.state.update_block(human.id, value=f"writer {i}", expected_version=1)
                outcomes.append("ok")
            except cairn.Aborted:
                outcomes.append("aborted")

        threads = [threading.Thread(target=attempt, args=(a if i % 2 else b, i)) for i in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert sorted(outcomes) == ["aborted"] * 7 + ["ok"]
        assert a.state.get_block(human.id).version == 2


def test_a_conversation_written_through_both_replicas_verifies_as_one_chain(fleet: Fleet) -> None:
    with fleet.client(0) as a, fleet.client(1) as b:
        created = a.recall.create_stream(cairn.StreamKind.CONVERSATION, owner_agent_id="planner")
        stream = created.stream.id
        b.recall.attach(stream, "coder", cairn.ParticipantRole.WRITER)
        for i in range(20):
            writer, author = (a, "planner") if i % 2 else (b, "coder")
            writer.recall.write(
                stream, f"turn {i}", source_agent_id=author, idempotency_key=f"t{i}"
            )
        records = [r.to_proto() for r in b.recall.read(stream, include_events=True)]
        assert [r.seq for r in records] == list(range(1, 23))
        info = a.recall.get_stream(stream)
        kind = recall_pb2.StreamKind.Value("STREAM_KIND_CONVERSATION")
        genesis = verify.genesis_hash(info.tenant, stream, kind, to_timestamp(info.created_at))
        checkpoint = b.recall.get_checkpoint(stream).to_proto()
        verify.verify_log(records, genesis, checkpoint, a.recall.get_public_key().public_key)
        assert checkpoint.size == 22


def test_steps_committed_through_both_state_replicas_reach_recall_once(fleet: Fleet) -> None:
    with fleet.client(0) as a, fleet.client(1) as b:
        agent = a.state.create_agent("forwarded")
        version = 1
        ids: list[str] = []
        for i in range(6):
            client = a if i % 2 else b
            step = client.state.commit_step(
                agent.id, [cairn.Message.user(f"q{i}")], base_context_version=version
            )
            version = step.context_version
            ids += [m.id for m in step.messages]
        deadline = time.monotonic() + 20
        found: list[str] = []
        while time.monotonic() < deadline and len(found) < 6:
            try:
                found = [r.idempotency_key for r in a.recall.read(f"messages-{agent.id}")]
            except cairn.NotFound:
                found = []
            time.sleep(0.2)
        assert found == ids
