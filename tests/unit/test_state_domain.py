"""Cache, revisions and block fan-out through the domain layer on a real SQLite store."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from cairn_server.auth import Principal, Role
from cairn_server.errors import (
    Aborted,
    AlreadyExists,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
)
from state_service import agents, blocks
from state_service.agents import AgentSpec
from state_service.context import compile_context
from state_service.core import Deps
from state_service.models import AgentEvent, Block, EventKind, MemoryUpdateMode
from state_service.store.base import StateStore
from state_service.store.postgres import PostgresStateStore
from state_service.store.sqlite import SqliteStateStore

ADMIN = Principal("t1", "admin", Role.ADMIN)
OTHER = Principal("t2", "admin", Role.ADMIN)


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        self.now += 1
        return self.now


class Events(list[AgentEvent]):
    """Committed events. PostgreSQL delivers them through LISTEN, a moment after the commit,
    so `settled()` waits until none have arrived for a while."""

    def publish(self, events: list[AgentEvent]) -> None:
        self.extend(events)

    def settled(self, quiet: float = 0.3) -> Events:
        seen = -1
        while seen != len(self):
            seen = len(self)
            time.sleep(quiet)
        return self


@pytest.fixture
def events() -> Events:
    return Events()


@pytest.fixture(params=["sqlite", "postgres"])
def deps(request: pytest.FixtureRequest, tmp_path: Path, events: Events) -> Iterator[Deps]:
    store: StateStore
    if request.param == "sqlite":
        store = SqliteStateStore(tmp_path, events.publish)
    else:
        url = request.getfixturevalue("postgres_url")
        schema = request.getfixturevalue("postgres_schema")
        store = PostgresStateStore(url, events.publish, schema=schema)
    yield Deps(store=store, clock=Clock())
    store.close()


def spec_block(label: str, value: str = "") -> Block:
    return Block(id="", tenant="", label=label, value=value)


def make_pair(deps: Deps) -> tuple[str, str, str]:
    human = blocks.create_block(deps, ADMIN, spec_block("human", "Name: Sam"))
    a = agents.create_agent(deps, ADMIN, AgentSpec(name="a", block_ids=[human.id]))
    b = agents.create_agent(deps, ADMIN, AgentSpec(name="b", block_ids=[human.id]))
    return human.id, a.id, b.id


def test_first_compile_after_create_is_a_cache_hit(deps: Deps) -> None:
    agent = agents.create_agent(deps, ADMIN, AgentSpec(name="a", memory_blocks=[spec_block("h")]))
    first = compile_context(deps, ADMIN, agent.id)
    assert first.cache_hit is True
    assert first.memory_revision == "1"
    assert compile_context(deps, ADMIN, agent.id).system_prompt == first.system_prompt


def test_forced_recompile_of_unchanged_state_gives_identical_bytes(deps: Deps) -> None:
    _, a, _ = make_pair(deps)
    cached = compile_context(deps, ADMIN, a)
    forced = compile_context(deps, ADMIN, a, force=True)
    assert forced.cache_hit is False
    assert forced.system_prompt == cached.system_prompt
    assert forced.prompt_hash == cached.prompt_hash


def test_shared_block_update_rebuilds_every_attached_agent(deps: Deps, events: Events) -> None:
    human, a, b = make_pair(deps)
    events.settled().clear()
    result = blocks.update_block(deps, ADMIN, human, {"value": "Name: Sam. Likes tea."}, None)
    assert result.block.version == 2
    assert result.affected_agent_ids == [a, b]
    assert result.rebuilt_agent_ids == [a, b]
    for agent_id in (a, b):
        ctx = compile_context(deps, ADMIN, agent_id)
        assert ctx.cache_hit is True
        assert ctx.memory_revision == "2"
        assert "Name: Sam. Likes tea.\n</value>" in ctx.system_prompt
    kinds = sorted((e.agent_id, e.kind.value) for e in events.settled())
    assert kinds == sorted(
        [(a, "block_updated"), (b, "block_updated"), (a, "prompt_rebuilt"), (b, "prompt_rebuilt")]
    )


def test_tags_or_metadata_change_rebuilds_nothing(deps: Deps) -> None:
    human, a, _ = make_pair(deps)
    before = compile_context(deps, ADMIN, a)
    result = blocks.update_block(deps, ADMIN, human, {"tags": ["x"], "metadata": {"k": "v"}}, None)
    assert result.block.version == 2
    assert result.rebuilt_agent_ids == []
    after = compile_context(deps, ADMIN, a)
    assert after.memory_revision == before.memory_revision == "1"
    assert after.system_prompt == before.system_prompt


def test_no_op_update_writes_nothing(deps: Deps, events: Events) -> None:
    human, a, _ = make_pair(deps)
    events.settled().clear()
    result = blocks.update_block(deps, ADMIN, human, {"value": "Name: Sam"}, None)
    assert result.block.version == 1
    assert result.affected_agent_ids == []
    assert events.settled() == []
    assert agents.get_agent(deps, ADMIN, a).memory_revision == 1


def test_stale_expected_version_is_aborted_and_changes_nothing(deps: Deps) -> None:
    human, _, _ = make_pair(deps)
    blocks.update_block(deps, ADMIN, human, {"value": "v2"}, 1)
    with pytest.raises(Aborted, match="at version 2, not the expected 1"):
        blocks.update_block(deps, ADMIN, human, {"value": "v3"}, 1)
    assert blocks.get_block(deps, ADMIN, human).value == "v2"


def test_message_mode_keeps_stored_prompt_and_returns_memory_update(deps: Deps) -> None:
    human = blocks.create_block(deps, ADMIN, spec_block("human", "old"))
    agent = agents.create_agent(
        deps,
        ADMIN,
        AgentSpec(name="m", block_ids=[human.id], memory_update_mode=MemoryUpdateMode.MESSAGE),
    )
    before = compile_context(deps, ADMIN, agent.id)
    result = blocks.update_block(deps, ADMIN, human.id, {"value": "new"}, None)
    assert result.affected_agent_ids == [agent.id]
    assert result.rebuilt_agent_ids == []
    after = compile_context(deps, ADMIN, agent.id)
    assert after.system_prompt == before.system_prompt
    assert after.prompt_hash == before.prompt_hash
    assert after.memory_revision == "2"
    assert after.memory_update.startswith('<memory_update revision="2">\n')
    assert "<value>\nnew\n</value>" in after.memory_update
    assert "<value>\nnew\n</value>" in after.compiled_memory


def test_system_change_recompiles_with_new_raw_hash(deps: Deps) -> None:
    agent = agents.create_agent(deps, ADMIN, AgentSpec(name="a", system="v1 {CORE_MEMORY}"))
    updated, rebuilt = agents.update_agent(deps, ADMIN, agent.id, {"system": "v2 {CORE_MEMORY}"}, 1)
    assert rebuilt is True
    assert updated.version == 2
    ctx = compile_context(deps, ADMIN, agent.id)
    assert ctx.cache_hit is True
    assert ctx.system_prompt.startswith("v2 <memory_metadata>")


def test_attach_detach_and_reorder_bump_the_revision(deps: Deps) -> None:
    x = blocks.create_block(deps, ADMIN, spec_block("x", "1"))
    y = blocks.create_block(deps, ADMIN, spec_block("y", "2"))
    agent = agents.create_agent(deps, ADMIN, AgentSpec(name="a", block_ids=[x.id]))
    agent = agents.attach_block(deps, ADMIN, agent.id, y.id, 0, None)
    assert [b.label for b in agent.blocks] == ["y", "x"]
    assert agent.memory_revision == 2
    agent = agents.reorder_blocks(deps, ADMIN, agent.id, [x.id, y.id], None)
    assert agent.memory_revision == 3
    prompt = compile_context(deps, ADMIN, agent.id).system_prompt
    assert prompt.index("<x>") < prompt.index("<y>")
    agent = agents.detach_block(deps, ADMIN, agent.id, x.id, None)
    assert agent.memory_revision == 4
    assert "<x>" not in compile_context(deps, ADMIN, agent.id).system_prompt
    assert blocks.get_block(deps, ADMIN, x.id).value == "1"


def test_block_order_survives_reload(deps: Deps) -> None:
    ids = [blocks.create_block(deps, ADMIN, spec_block(f"b{i}")).id for i in range(5)]
    order = [ids[3], ids[0], ids[4], ids[1], ids[2]]
    agent = agents.create_agent(deps, ADMIN, AgentSpec(name="a", block_ids=order))
    assert [b.id for b in agents.get_agent(deps, ADMIN, agent.id).blocks] == order


def test_duplicate_label_on_one_agent_is_refused(deps: Deps) -> None:
    one = blocks.create_block(deps, ADMIN, spec_block("human"))
    two = blocks.create_block(deps, ADMIN, spec_block("human"))
    with pytest.raises(InvalidArgument, match="label 'human' is used by two blocks"):
        agents.create_agent(deps, ADMIN, AgentSpec(name="a", block_ids=[one.id, two.id]))
    agent = agents.create_agent(deps, ADMIN, AgentSpec(name="a", block_ids=[one.id]))
    with pytest.raises(AlreadyExists, match="already has a block labelled 'human'"):
        agents.attach_block(deps, ADMIN, agent.id, two.id, None, None)
    other = blocks.create_block(deps, ADMIN, spec_block("persona"))
    agents.attach_block(deps, ADMIN, agent.id, other.id, None, None)
    with pytest.raises(AlreadyExists, match="already has a block labelled 'human'"):
        blocks.update_block(deps, ADMIN, other.id, {"label": "human"}, None)


def test_delete_attached_block_needs_force(deps: Deps) -> None:
    human, a, b = make_pair(deps)
    with pytest.raises(FailedPrecondition, match="attached to 2 agent"):
        blocks.delete_block(deps, ADMIN, human, False, None)
    assert blocks.delete_block(deps, ADMIN, human, True, None) == [a, b]
    assert agents.get_agent(deps, ADMIN, a).blocks == []
    assert "<human>" not in compile_context(deps, ADMIN, b).system_prompt
    with pytest.raises(NotFound):
        blocks.get_block(deps, ADMIN, human)


def test_other_tenant_sees_not_found(deps: Deps) -> None:
    human, a, _ = make_pair(deps)
    with pytest.raises(NotFound, match=f"agent '{a}' not found"):
        agents.get_agent(deps, OTHER, a)
    with pytest.raises(NotFound, match=f"block '{human}' not found"):
        blocks.update_block(deps, OTHER, human, {"value": "x"}, None)
    with pytest.raises(NotFound):
        compile_context(deps, OTHER, a)
    with pytest.raises(NotFound):
        agents.create_agent(deps, OTHER, AgentSpec(name="x", block_ids=[human]))


def test_listing_pages_in_creation_order_with_tag_filters(deps: Deps) -> None:
    for i in range(7):
        agents.create_agent(
            deps, ADMIN, AgentSpec(name=f"a{i}", tags=["even" if i % 2 == 0 else "odd", "all"])
        )
    page, token = agents.list_agents(
        deps, ADMIN, page_size=3, page_token="", tags=["all"], match_all_tags=False, name=""
    )
    names = [a.name for a in page]
    while token:
        page, token = agents.list_agents(
            deps, ADMIN, page_size=3, page_token=token, tags=["all"], match_all_tags=False, name=""
        )
        names += [a.name for a in page]
    assert names == [f"a{i}" for i in range(7)]
    evens, _ = agents.list_agents(
        deps,
        ADMIN,
        page_size=100,
        page_token="",
        tags=["even", "all"],
        match_all_tags=True,
        name="",
    )
    assert [a.name for a in evens] == ["a0", "a2", "a4", "a6"]
    _, first_token = agents.list_agents(
        deps, ADMIN, page_size=1, page_token="", tags=[], match_all_tags=False, name=""
    )
    with pytest.raises(InvalidArgument, match="different query"):
        agents.list_agents(
            deps,
            ADMIN,
            page_size=1,
            page_token=first_token,
            tags=["odd"],
            match_all_tags=False,
            name="",
        )


def test_memory_update_event_kinds_name_the_block(deps: Deps, events: Events) -> None:
    human, a, _ = make_pair(deps)
    events.settled().clear()
    blocks.update_block(deps, ADMIN, human, {"description": "the user"}, None)
    updated = [e for e in events.settled() if e.kind is EventKind.BLOCK_UPDATED and e.agent_id == a]
    assert len(updated) == 1
    assert updated[0].block_id == human
    assert updated[0].memory_revision == "2"
