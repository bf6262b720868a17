"""cairn.Client and cairn.AsyncClient driving a real state service and a real recall service
(one data directory, as `cairn up` runs them): agents, shared blocks, compiled prompts, steps,
memory tools, watch, MemFS, streams, writes and reads, checkpoints and proofs checked with
`cairn.verify`, and the typed errors the servers answer."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

import cairn
from cairn import verify
from cairn_server.auth import Role
from tests.servers import ServerProcess, free_port, make_key

PERSONA = "---\ndescription: Who I am\n---\nI am careful.\n"


@dataclass
class Deployment:
    state: str
    recall: str
    admin: str
    agents: dict[str, str]

    def client(self, key: str | None = None) -> cairn.Client:
        return cairn.Client(self.state, self.recall, api_key=key or self.admin, timeout=20)

    def async_client(self, key: str | None = None) -> cairn.AsyncClient:
        return cairn.AsyncClient(self.state, self.recall, api_key=key or self.admin, timeout=20)


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    data_dir = tmp_path_factory.mktemp("client-e2e")
    state = ServerProcess(
        "state_service", data_dir, free_port(), ["--max-message-bytes", "65536"], {}
    )
    recall = ServerProcess("recall_service", data_dir, free_port(), [], {})
    state.start()
    try:
        recall.start()
        agents = {
            name: make_key(data_dir, "acme", Role.AGENT, name) for name in ("planner", "coder")
        }
        yield Deployment(state.address, recall.address, make_key(data_dir, "acme"), agents)
    finally:
        recall.kill()
        state.kill()


@pytest.fixture
def client(deployment: Deployment) -> Iterator[cairn.Client]:
    with deployment.client() as c:
        yield c


# --- state ----------------------------------------------------------------------------------


def test_two_agents_share_a_block_and_see_each_others_edits(client: cairn.Client) -> None:
    human = client.state.create_block("human", "Name: Sam", description="The user")
    one = client.state.create_agent(
        "one",
        system="You are One.\n{CORE_MEMORY}",
        blocks=[cairn.BlockSpec("persona", "I am One.")],
        block_ids=[human.id],
        tags=["e2e"],
        metadata={"team": "core"},
    )
    two = client.state.create_agent("two", system="You are Two.", block_ids=[human.id])
    assert [b.label for b in one.blocks] == ["persona", "human"]
    assert (one.tags, one.metadata, one.memory_mode) == (
        ("e2e",),
        {"team": "core"},
        cairn.MemoryMode.STANDARD,
    )
    assert client.state.get_agent(one.id) == one

    update = client.state.update_block(
        human.id, value="Name: Sam. Prefers tea.", expected_version=human.version
    )
    assert update.block.version == human.version + 1
    assert sorted(update.affected_agent_ids) == sorted([one.id, two.id])
    assert sorted(update.rebuilt_agent_ids) == sorted([one.id, two.id])
    with pytest.raises(cairn.Aborted):
        client.state.update_block(human.id, value="lost", expected_version=human.version)

    edit = client.state.execute_memory_tool(
        two.id, "core_memory_append", {"label": "human", "content": "Has a cat."}
    )
    assert (edit.ok, edit.error) == (True, None)
    assert edit.block is not None and edit.block.value == "Name: Sam. Prefers tea.\nHas a cat."
    assert one.id in edit.rebuilt_agent_ids
    for agent in (one, two):
        prompt = client.state.compile_context(agent.id).system_prompt
        assert "<value>\nName: Sam. Prefers tea.\nHas a cat.\n</value>" in prompt
    refused = client.state.execute_memory_tool(
        one.id, "core_memory_append", '{"label": "nobody", "content": "x"}'
    )
    assert (refused.ok, refused.error, refused.block) == (
        False,
        cairn.MemoryToolError.UNKNOWN_LABEL,
        None,
    )


def test_a_step_commits_once_and_its_messages_come_back(client: cairn.Client) -> None:
    agent = client.state.create_agent("stepper", blocks=[cairn.BlockSpec("notes")])
    context = client.state.compile_context(agent.id)
    assert (context.status, context.messages, context.cache_hit) == (
        cairn.ContextStatus.OK,
        (),
        True,
    )
    assert [t["function"]["name"] for t in context.tools][:2] == [
        "core_memory_append",
        "core_memory_replace",
    ]
    call = cairn.ToolCall("call-1", "core_memory_append", '{"label":"notes","content":"tea"}')
    messages = [
        cairn.Message.user("Remember tea."),
        cairn.Message.assistant("", (call,)),
        cairn.Message.tool("Done.", tool_call_id="call-1", name="core_memory_append"),
        cairn.Message.assistant("Noted."),
    ]
    step = client.state.commit_step(
        agent.id, messages, base_context_version=context.context_version, step_id="step-e2e-1"
    )
    assert (step.step_id, step.replayed, step.context_version) == ("step-e2e-1", False, 2)
    assert [(m.role, m.content, m.step_id) for m in step.messages] == [
        (cairn.MessageRole.USER, "Remember tea.", "step-e2e-1"),
        (cairn.MessageRole.ASSISTANT, "", "step-e2e-1"),
        (cairn.MessageRole.TOOL, "Done.", "step-e2e-1"),
        (cairn.MessageRole.ASSISTANT, "Noted.", "step-e2e-1"),
    ]
    assert step.messages[1].tool_calls == (call,)
    assert all(m.id.startswith("message-") and m.created_at for m in step.messages)

    again = client.state.commit_step(
        agent.id, messages, base_context_version=context.context_version, step_id="step-e2e-1"
    )
    assert (again.replayed, [m.id for m in again.messages]) == (
        True,
        [m.id for m in step.messages],
    )
    with pytest.raises(cairn.Aborted):
        client.state.commit_step(agent.id, messages[:1], base_context_version=1)

    window = client.state.compile_context(agent.id, view=cairn.ContextView.PROMPT)
    assert window.messages == step.messages
    assert window.compiled_memory == ""
    users = list(client.state.list_messages(agent.id, roles=[cairn.MessageRole.USER]))
    assert [m.content for m in users] == ["Remember tea."]
    newest = list(client.state.list_messages(agent.id, newest_first=True, page_size=2))
    assert [(m.role, m.content) for m in newest[:4]] == [
        (cairn.MessageRole.ASSISTANT, "Noted."),
        (cairn.MessageRole.TOOL, "Done."),
        (cairn.MessageRole.ASSISTANT, ""),
        (cairn.MessageRole.USER, "Remember tea."),
    ]
    assert [m.role for m in newest[4:]] == [cairn.MessageRole.SYSTEM]


def test_lists_follow_page_tokens_across_pages(client: cairn.Client) -> None:
    ids = [client.state.create_block("paged", str(i), tags=["paging"]).id for i in range(5)]
    listed = client.state.list_blocks(label="paged", page_size=2)
    assert [b.id for b in listed] == ids
    assert [b.value for b in client.state.list_blocks(tags=["paging"], page_size=4)] == [
        "0",
        "1",
        "2",
        "3",
        "4",
    ]


def test_update_agent_sets_only_the_fields_given(client: cairn.Client) -> None:
    agent = client.state.create_agent("before", system="Old.", tags=["a"])
    updated = client.state.update_agent(agent.id, system="New.", expected_version=agent.version)
    assert (updated.agent.name, updated.agent.system, updated.agent.tags) == (
        "before",
        "New.",
        ("a",),
    )
    assert updated.prompt_rebuilt is True
    renamed = client.state.update_agent(agent.id, name="after", tags=[])
    assert (renamed.agent.name, renamed.agent.tags, renamed.prompt_rebuilt) == ("after", (), False)
    client.state.delete_agent(agent.id)
    with pytest.raises(cairn.NotFound):
        client.state.get_agent(agent.id)


def test_blocks_attach_reorder_detach_and_export(client: cairn.Client) -> None:
    agent = client.state.create_agent(
        "arranged", blocks=[cairn.BlockSpec("a"), cairn.BlockSpec("b")]
    )
    extra = client.state.create_block("c", "see")
    attached = client.state.attach_block(agent.id, extra.id, position=0)
    assert [b.label for b in attached.blocks] == ["c", "a", "b"]
    order = [attached.blocks[2].id, attached.blocks[1].id, attached.blocks[0].id]
    assert [b.label for b in client.state.reorder_blocks(agent.id, order).blocks] == ["b", "a", "c"]
    detached = client.state.detach_block(agent.id, extra.id)
    assert [b.label for b in detached.blocks] == ["b", "a"]
    assert client.state.delete_block(extra.id) == []

    exported = client.state.export_agent([agent.id])
    imported = client.state.import_agent(exported)
    (copy,) = imported.agents
    assert copy.id != agent.id and imported.id_map[agent.id] == copy.id
    assert [b.label for b in copy.blocks] == ["b", "a"]


def test_watch_delivers_a_block_update_and_the_rebuild(client: cairn.Client) -> None:
    human = client.state.create_block("human", "v1")
    agent = client.state.create_agent("watched", block_ids=[human.id])
    events = client.state.watch_agent(agent.id, timeout=20)
    try:
        started = next(events)
        assert (started.type, started.agent_id) == (cairn.EventType.WATCH_STARTED, agent.id)
        client.state.update_block(human.id, value="v2")
        updated, rebuilt = next(events), next(events)
    finally:
        events.close()
    assert (updated.type, updated.block_id) == (cairn.EventType.BLOCK_UPDATED, human.id)
    assert rebuilt.type is cairn.EventType.PROMPT_REBUILT
    assert rebuilt.prompt_hash == client.state.compile_context(agent.id).prompt_hash


def test_compaction_plans_and_applies_a_summary(client: cairn.Client) -> None:
    probe = client.state.create_agent("probe")
    base = client.state.compile_context(probe.id).tokens.total
    agent = client.state.create_agent("compacted", context_window=base + 400)
    for i in range(6):
        context = client.state.compile_context(agent.id)
        client.state.commit_step(
            agent.id,
            [cairn.Message.user(f"turn {i} " + "word " * 40), cairn.Message.assistant("ok")],
            base_context_version=context.context_version,
        )
    assert client.state.compile_context(agent.id).status is cairn.ContextStatus.NEEDS_COMPACTION
    plan = client.state.plan_compaction(agent.id)
    assert plan.messages[0].content.startswith("turn 0 ")
    assert plan.tokens_after < plan.tokens_before
    applied = client.state.apply_compaction(agent.id, plan.plan_id, "The user counted turns.")
    assert (applied.summary_message.role, applied.summary_message.content) == (
        cairn.MessageRole.SUMMARY,
        "The user counted turns.",
    )
    with pytest.raises(cairn.FailedPrecondition):
        client.state.apply_compaction(agent.id, plan.plan_id, "again")


def test_memfs_files_commit_list_and_revert(client: cairn.Client) -> None:
    agent = client.state.create_agent(
        "files", system="You remember.", memory_mode=cairn.MemoryMode.MEMFS
    )
    first = client.state.commit_memory_files(
        agent.id, upserts={"system/persona.md": PERSONA}, message="Who I am"
    )
    assert (first.changed_paths, first.prompt_rebuilt) == (("system/persona.md",), True)
    files = client.state.list_memory_files(agent.id)
    assert [(f.path, f.body, f.description, f.revision) for f in files] == [
        ("system/persona.md", "I am careful.\n", "Who I am", first.revision)
    ]
    second = client.state.commit_memory_files(agent.id, deletes=["system/persona.md"])
    history = list(client.state.memory_history(agent.id, page_size=1))
    assert [c.revision for c in history][:2] == [second.revision, first.revision]
    reverted = client.state.revert_memory(agent.id, first.revision)
    assert reverted.changed_paths == ("system/persona.md",)
    assert client.state.get_memory_file(agent.id, "system/persona.md").content == PERSONA
    with pytest.raises(cairn.FailedPrecondition):
        client.state.list_memory_files(client.state.create_agent("plain").id)


# --- recall ---------------------------------------------------------------------------------


def test_agents_share_a_conversation_that_verifies_on_the_client(
    deployment: Deployment, client: cairn.Client
) -> None:
    created = client.recall.create_stream(cairn.StreamKind.CONVERSATION, owner_agent_id="planner")
    stream_id = created.stream.id
    assert created.owner_attach is not None
    assert (created.owner_attach.kind, created.owner_attach.subject_agent_id) == (
        cairn.RecordKind.ATTACH,
        "planner",
    )
    joined = client.recall.attach(stream_id, "coder")
    assert (joined.participant.role, joined.participant.attached_seq) == (
        cairn.ParticipantRole.WRITER,
        2,
    )
    assert client.recall.attach(stream_id, "coder").record is None  # held the role already
    kept = client.recall.get_checkpoint(stream_id)

    with (
        deployment.client(deployment.agents["planner"]) as planner,
        deployment.client(deployment.agents["coder"]) as coder,
    ):
        plan = planner.recall.write(stream_id, "Ship on Friday.", tags=["plan"], metadata={"p": 1})
        took = coder.recall.write(stream_id, "I'll take the API.", idempotency_key="coder-1")
        again = coder.recall.write(stream_id, "I'll take the API.", idempotency_key="coder-1")
        assert (plan.record.seq, plan.record.source_agent_id, plan.record.written_by) == (
            3,
            "planner",
            "agent:planner",
        )
        assert (plan.record.tags, plan.record.metadata) == (("plan",), {"p": 1})
        assert (took.record.seq, took.replayed, again.record.seq, again.replayed) == (
            4,
            False,
            4,
            True,
        )
        assert [(r.seq, r.content) for r in coder.recall.read(stream_id)] == [
            (3, "Ship on Friday."),
            (4, "I'll take the API."),
        ]
        assert [r.seq for r in coder.recall.read(stream_id, source_agent_ids=["planner"])] == [3]
        with pytest.raises(cairn.PermissionDenied):
            coder.recall.write(stream_id, "As the planner.", source_agent_id="planner")

    records = list(client.recall.read(stream_id, include_events=True, page_size=2))
    assert [r.kind for r in records] == [
        cairn.RecordKind.ATTACH,
        cairn.RecordKind.ATTACH,
        cairn.RecordKind.MESSAGE,
        cairn.RecordKind.MESSAGE,
    ]
    stream = client.recall.get_stream(stream_id)
    checkpoint = client.recall.get_checkpoint(stream_id)
    public_key = client.recall.get_public_key()
    assert (stream.size, checkpoint.size, public_key.algorithm) == (4, 4, "Ed25519")
    verify.verify_log(
        [r.to_proto() for r in records],
        stream.genesis,
        checkpoint.to_proto(),
        public_key.public_key,
    )
    proof = client.recall.get_inclusion_proof(stream_id, 3)
    assert (proof.leaf_index, proof.tree_size, proof.leaf_hash) == (2, 4, records[2].leaf_hash)
    verify.verify_inclusion(
        proof.leaf_hash, proof.leaf_index, proof.tree_size, proof.proof, checkpoint.root
    )
    with pytest.raises(verify.VerificationError):
        verify.verify_inclusion(
            records[3].leaf_hash, proof.leaf_index, proof.tree_size, proof.proof, checkpoint.root
        )
    consistency = client.recall.get_consistency_proof(stream_id, kept.size)
    verify.verify_consistency(
        kept.size, consistency.to_size, consistency.proof, kept.root, checkpoint.root
    )
    verdict = client.recall.verify_stream(stream_id, trusted_checkpoint=kept)
    assert (verdict.ok, verdict.size, verdict.chain_head) == (True, 4, checkpoint.chain_head)

    redacted = client.recall.redact(stream_id, 3, reason="wrong channel")
    assert (redacted.record.kind, redacted.record.target_seq) == (cairn.RecordKind.REDACTION, 3)
    after = list(client.recall.read(stream_id, first_seq=3, last_seq=3))
    assert (after[0].content, after[0].redacted, after[0].redacted_by_seq) == ("", True, 5)
    assert client.recall.verify_stream(stream_id).ok is True

    client.recall.detach(stream_id, "coder")
    assert [p.agent_id for p in client.recall.list_participants(stream_id)] == ["planner"]
    with (
        deployment.client(deployment.agents["coder"]) as coder,
        pytest.raises(cairn.PermissionDenied),
    ):
        list(coder.recall.read(stream_id))


def test_a_batch_writes_all_entries_and_overlaps_are_found(client: cairn.Client) -> None:
    created = client.recall.create_stream(cairn.StreamKind.CONVERSATION, owner_agent_id="planner")
    stream_id = created.stream.id
    client.recall.attach(stream_id, "coder")
    batch = client.recall.write_batch(
        stream_id,
        [
            cairn.WriteEntry("I'll fix it.", source_agent_id="planner", idempotency_key="b1"),
            cairn.WriteEntry("I'm on it.", source_agent_id="coder", idempotency_key="b2"),
        ],
    )
    assert [r.seq for r in batch.records] == [3, 4]
    assert batch.checkpoint is not None and batch.checkpoint.size == 4
    pairs = list(client.recall.overlapping_writes(stream_id, 5.0))
    assert [(p.earlier.seq, p.later.seq) for p in pairs] == [(3, 4)]
    kinds = {s.id: s.kind for s in client.recall.list_streams(kind=cairn.StreamKind.CONVERSATION)}
    assert kinds[stream_id] is cairn.StreamKind.CONVERSATION


# --- errors the servers answer ---------------------------------------------------------------


def test_invalid_argument_carries_the_servers_field_violations(client: cairn.Client) -> None:
    with pytest.raises(cairn.InvalidArgument) as caught:
        client.state.create_block("")
    assert caught.value.details == "block.label: must not be empty"
    assert caught.value.field_violations == (
        cairn.FieldViolation("block.label", "must not be empty"),
    )
    with pytest.raises(cairn.InvalidArgument) as caught:
        client.state.create_block("h", "x" * 11, limit=10)
    assert caught.value.field_violations == (
        cairn.FieldViolation(
            "block.value", "is 11 characters, longer than the block's limit of 10 (by 1)"
        ),
    )
    stream = client.recall.create_stream(cairn.StreamKind.CONVERSATION, owner_agent_id="planner")
    with pytest.raises(cairn.InvalidArgument) as caught:
        client.recall.write(stream.stream.id, "", source_agent_id="planner")
    assert [v.field for v in caught.value.field_violations] == ["entry.content"]


def test_each_refusal_of_the_servers_is_its_typed_error(
    deployment: Deployment, client: cairn.Client
) -> None:
    with pytest.raises(cairn.NotFound) as not_found:
        client.state.get_agent("agent-x")
    assert not_found.value.details == "agent 'agent-x' not found"

    block = client.state.create_block("human")
    agent = client.state.create_agent("holder", block_ids=[block.id])
    with pytest.raises(cairn.AlreadyExists):
        client.state.attach_block(agent.id, block.id)
    with pytest.raises(cairn.FailedPrecondition):
        client.state.delete_block(block.id)
    assert client.state.delete_block(block.id, force=True) == [agent.id]

    with pytest.raises(cairn.ResourceExhausted):
        client.state.create_block("big", "x" * 70_000, limit=100_000)
    with pytest.raises(cairn.AlreadyExists):
        client.recall.create_stream(cairn.StreamKind.CONVERSATION, stream_id="taken")
        client.recall.create_stream(cairn.StreamKind.CONVERSATION, stream_id="taken")

    with (
        deployment.client("ck_not_a_key") as stranger,
        pytest.raises(cairn.Unauthenticated) as unauthenticated,
    ):
        stranger.state.get_agent(agent.id)
    assert unauthenticated.value.code.name == "UNAUTHENTICATED"


# --- the asyncio client ---------------------------------------------------------------------


async def test_async_client_drives_both_services(deployment: Deployment) -> None:
    async with deployment.async_client() as client:
        human = await client.state.create_block("human", "Name: Ada")
        agent = await client.state.create_agent("async-one", block_ids=[human.id])
        context = await client.state.compile_context(agent.id)
        assert "<value>\nName: Ada\n</value>" in context.system_prompt
        step = await client.state.commit_step(
            agent.id,
            [cairn.Message.user("Hi"), cairn.Message.assistant("Hello, Ada.")],
            base_context_version=context.context_version,
        )
        assert [m.content for m in step.messages] == ["Hi", "Hello, Ada."]
        edit = await client.state.execute_memory_tool(
            agent.id,
            "memory_replace",
            {"label": "human", "old_string": "Ada", "new_string": "Ada L."},
        )
        assert edit.ok and edit.block is not None and edit.block.value == "Name: Ada L."
        history = [m.content async for m in client.state.list_messages(agent.id, page_size=1)]
        assert history[1:] == ["Hi", "Hello, Ada."]

        events: list[cairn.AgentEvent] = []

        async def watch() -> None:
            async with contextlib.aclosing(client.state.watch_agent(agent.id)) as stream:
                async for event in stream:
                    events.append(event)
                    if event.type is cairn.EventType.PROMPT_REBUILT:
                        return

        watcher = asyncio.create_task(watch())
        while not events:
            await asyncio.sleep(0.01)
        await client.state.update_block(human.id, value="Name: Ada Lovelace")
        await asyncio.wait_for(watcher, 10)
        assert [e.type for e in events] == [
            cairn.EventType.WATCH_STARTED,
            cairn.EventType.BLOCK_UPDATED,
            cairn.EventType.PROMPT_REBUILT,
        ]

        created = await client.recall.create_stream(
            cairn.StreamKind.CONVERSATION, owner_agent_id="planner"
        )
        stream_id = created.stream.id
        written = await client.recall.write(
            stream_id, "From asyncio.", source_agent_id="planner", idempotency_key="a1"
        )
        records = [r async for r in client.recall.read(stream_id, include_events=True)]
        assert [r.seq for r in records] == [1, written.record.seq]
        checkpoint = await client.recall.get_checkpoint(stream_id)
        proof = await client.recall.get_inclusion_proof(stream_id, written.record.seq)
        verify.verify_inclusion(
            proof.leaf_hash, proof.leaf_index, proof.tree_size, proof.proof, checkpoint.root
        )
        key = await client.recall.get_public_key()
        verify.verify_checkpoint(checkpoint.to_proto(), key.public_key)
        with pytest.raises(cairn.NotFound):
            await client.state.get_agent("agent-missing")
        with pytest.raises(cairn.InvalidArgument) as caught:
            await client.state.create_block("")
        assert caught.value.field_violations == (
            cairn.FieldViolation("block.label", "must not be empty"),
        )
