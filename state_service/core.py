"""What every state operation needs, and the one way memory changes propagate."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from cairn_server import tracing
from cairn_server.errors import FailedPrecondition, NotFound
from cairn_server.metrics import Metrics
from state_service.compile import compile_memory, render_tool_rules
from state_service.memfs.snapshots import MemorySnapshots
from state_service.models import (
    Agent,
    AgentEvent,
    EventKind,
    MemoryMode,
    MemoryUpdateMode,
    StoredPrompt,
    ToolsPayload,
)
from state_service.prompts import build_prompt, rebuild_events, tools_json
from state_service.store.base import StateStore, StateTx
from state_service.tokens import CachedCounts, EstimateCounter, TokenCounter
from state_service.window import WindowCache

if TYPE_CHECKING:
    from state_service.context import ContextCache, FreshMemoryCache


def agent_not_found(agent_id: str) -> NotFound:
    """The one NOT_FOUND message for agents (the same for another tenant's id)."""
    return NotFound(f"agent '{agent_id}' not found")


def block_not_found(block_id: str) -> NotFound:
    """The one NOT_FOUND message for blocks (the same for another tenant's id)."""
    return NotFound(f"block '{block_id}' not found")


@dataclass
class Deps:
    """The store, the token counter, a clock and an id source."""

    store: StateStore
    counter: TokenCounter = field(default_factory=EstimateCounter)
    clock: Callable[[], float] = time.time
    memfs: MemorySnapshots | None = None
    metrics: Metrics | None = None
    # Whether a tenant's messages are forwarded to the recall service (None: never).
    forwards: Callable[[str], bool] | None = None
    counts: CachedCounts = field(init=False)
    windows: WindowCache = field(init=False)
    fresh_memory: FreshMemoryCache = field(init=False)
    contexts: ContextCache = field(init=False)

    def __post_init__(self) -> None:
        from state_service.context import ContextCache, FreshMemoryCache

        self.counts = CachedCounts(self.counter)
        self.windows = WindowCache()
        self.fresh_memory = FreshMemoryCache()
        self.contexts = ContextCache()

    def new_id(self, kind: str) -> str:
        """A fresh resource id such as `agent-<uuid>`."""
        return f"{kind}-{uuid.uuid4()}"

    def snapshots(self) -> MemorySnapshots:
        """The MemFS snapshots; FailedPrecondition when MemFS is not configured."""
        if self.memfs is None:
            raise FailedPrecondition("MEMFS agents are not available on this server")
        return self.memfs

    def memory_parts(self, agent: Agent) -> list[str] | None:
        """A MEMFS agent's rendered memory at its revision; None for block-based agents."""
        if agent.memory_mode is not MemoryMode.MEMFS:
            return None
        parts = list(self.snapshots().get(agent.id, agent.memory_head).memory)
        rules = render_tool_rules(agent.tool_rules)
        if rules:
            # As for blocks (and Letta): tool rules follow the memory after a blank line.
            parts.append(f"\n\n{rules}")
        return parts

    def render_memory(self, agent: Agent) -> str:
        """The agent's compiled memory as text."""
        parts = self.memory_parts(agent)
        if parts is None:
            return compile_memory(agent.blocks, agent.memory_mode, agent.tool_rules)
        return "".join(parts)

    def build_prompt(self, agent: Agent, now: float) -> StoredPrompt:
        """The agent's stored prompt, compiled from its blocks or its committed files."""
        with tracing.span("compile.prompt", memory_mode=agent.memory_mode.value):
            prompt = build_prompt(agent, self.counts, now, self.memory_parts(agent))
        if self.metrics is not None:
            self.metrics.prompt_rebuilds.inc()
        return prompt

    def count_compile(self, hit: bool) -> None:
        """Counts a CompileContext served from the stored prompt (hit) or recompiled."""
        if self.metrics is not None:
            self.metrics.compile_cache.labels("hit" if hit else "miss").inc()

    def tools_payload(self, agent: Agent) -> ToolsPayload:
        """The agent's tool schemas, then the memory tools, as sent to the model."""
        text = tools_json(agent.tools)
        return ToolsPayload(text, self.counter.count(text), self.counter.name)


def memory_changed(
    deps: Deps,
    tx: StateTx,
    agents: Sequence[Agent],
    now: float,
    kind: EventKind,
    *,
    block_id: str = "",
    bump_version: bool = False,
) -> list[str]:
    """Bumps the memory revision of `agents` and rebuilds their prompts, in one batch.

    `agents` must already hold their new blocks. Agents in MESSAGE mode keep their stored
    prompt (CompileContext hands them a memory update instead). Returns the ids of the
    agents whose prompt was rebuilt.
    """
    if not agents:
        return []
    tx.bump_memory(agents[0].tenant, [agent.id for agent in agents], now, bump_version)
    for agent in agents:
        agent.memory_revision += 1
        agent.memory_updated_at = now
        if bump_version:
            agent.version += 1
            agent.updated_at = now
    rebuild = [a for a in agents if a.memory_update_mode is MemoryUpdateMode.SYSTEM_PROMPT]
    if deps.metrics is not None:
        deps.metrics.rebuild_fanout.observe(len(rebuild))
    prompts = [deps.build_prompt(agent, now) for agent in rebuild]
    tx.save_prompts(prompts)
    events = [
        AgentEvent(
            kind=kind,
            tenant=agent.tenant,
            agent_id=agent.id,
            memory_revision=agent.revision,
            context_version=agent.context_version,
            agent_version=agent.version,
            time=now,
            block_id=block_id,
        )
        for agent in agents
    ]
    tx.emit(events + rebuild_events(rebuild, prompts, now))
    return [agent.id for agent in rebuild]
