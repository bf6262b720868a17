"""CompileContext: the stored prompt on a cache hit, a persisted recompilation otherwise,
with the in-context messages, the tool schemas and the token account."""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from enum import StrEnum

from cairn_server.auth import Principal
from state_service import access
from state_service.compile import format_memory_update
from state_service.core import Deps, agent_not_found
from state_service.models import MemoryUpdateMode, Message, PromptState, StoredPrompt
from state_service.prompts import rebuild_events
from state_service.store.base import StateReader
from state_service.window import Window


class ContextStatus(StrEnum):
    """Whether the context fits the window."""

    OK = "ok"
    NEEDS_COMPACTION = "needs_compaction"
    OVERFLOW_IN_SYSTEM_PROMPT = "context_window_overflow_in_system_prompt"


@dataclass(frozen=True, slots=True)
class TokenAccount:
    """Token use of the compiled context."""

    context_window: int
    system: int
    memory: int
    tools: int
    messages: int
    total: int


@dataclass(frozen=True, slots=True)
class CompiledContext:
    """What CompileContext returns."""

    agent_id: str
    system_prompt: str
    compiled_memory: str
    memory_revision: str
    prompt_hash: str
    tokens: TokenAccount
    cache_hit: bool
    memory_update: str
    status: ContextStatus
    messages: tuple[Message, ...]
    tools_json: str
    context_version: int
    available_skills: str = ""

    @property
    def cache_key(self) -> tuple[object, ...]:
        """Everything the response depends on: equal keys mean equal responses."""
        return (
            self.agent_id,
            self.prompt_hash,
            self.memory_revision,
            self.memory_update != "",
            self.context_version,
            self.cache_hit,
            self.tokens,
            self.status,
            self.tools_json,
            self.available_skills,
        )


@dataclass(frozen=True, slots=True)
class ContextSettings:
    """Server-wide settings of context accounting."""

    compaction_threshold: float = 0.9


@dataclass(frozen=True, slots=True)
class _FreshMemory:
    memory: str
    memory_tokens: int
    update: str
    update_tokens: int


class FreshMemoryCache:
    """Memory rendered for MESSAGE-mode agents whose stored prompt is older, per revision."""

    def __init__(self, size: int = 4096) -> None:
        self._items: OrderedDict[tuple[str, int], _FreshMemory] = OrderedDict()
        self._size = size
        self._lock = threading.Lock()

    def get(
        self, deps: Deps, reader: StateReader, tenant: str, agent_id: str, revision: int
    ) -> _FreshMemory:
        """The memory of `agent_id` at `revision`, rendered once."""
        key = (agent_id, revision)
        with self._lock:
            found = self._items.get(key)
        if found is not None:
            return found
        agent = reader.get_agent(tenant, agent_id)
        if agent is None:
            raise agent_not_found(agent_id)
        memory = deps.render_memory(agent)
        update = format_memory_update(memory, agent.revision)
        fresh = _FreshMemory(memory, deps.counter.count(memory), update, deps.counter.count(update))
        if agent.memory_revision == revision:
            with self._lock:
                self._items[key] = fresh
                while len(self._items) > self._size:
                    self._items.popitem(last=False)
        return fresh


def _skills(deps: Deps, state: PromptState) -> str:
    # Listed per request from the current commit, never stored in the prompt.
    if not state.memory_head:
        return ""
    return deps.snapshots().get(state.agent_id, state.memory_head).skills


def _status(tokens: TokenAccount, settings: ContextSettings) -> ContextStatus:
    if tokens.system > tokens.context_window:
        return ContextStatus.OVERFLOW_IN_SYSTEM_PROMPT
    if tokens.total > settings.compaction_threshold * tokens.context_window:
        return ContextStatus.NEEDS_COMPACTION
    return ContextStatus.OK


def _usable(state: PromptState, deps: Deps) -> StoredPrompt | None:
    prompt = state.prompt
    if (
        prompt is None
        or prompt.raw_hash != state.system_hash
        or prompt.counter != deps.counter.name
        or state.tools_counter != deps.counter.name
    ):
        return None
    if prompt.memory_revision == state.memory_revision:
        return prompt
    if state.memory_update_mode is MemoryUpdateMode.MESSAGE:
        return prompt
    return None


class ContextCache:
    """The last compiled context per agent, with the key it was compiled under."""

    def __init__(self, size: int = 4096) -> None:
        self._items: OrderedDict[str, tuple[tuple[object, ...], CompiledContext]] = OrderedDict()
        self._size = size
        self._lock = threading.Lock()

    def get(self, agent_id: str, key: tuple[object, ...]) -> CompiledContext | None:
        """The cached context when it was compiled under `key`."""
        with self._lock:
            found = self._items.get(agent_id)
        return found[1] if found is not None and found[0] == key else None

    def put(self, agent_id: str, key: tuple[object, ...], context: CompiledContext) -> None:
        """Remembers a context and its key."""
        with self._lock:
            self._items[agent_id] = (key, context)
            self._items.move_to_end(agent_id)
            while len(self._items) > self._size:
                self._items.popitem(last=False)


def cached_context(
    deps: Deps, principal: Principal, agent_id: str, settings: ContextSettings
) -> CompiledContext | None:
    """The context from the stored prompt, or None when it must be recompiled (reads only).

    One light read of the context's key serves a context compiled before under the same
    key; only when the key moved are the prompt, window and tools read and assembled.
    """
    access.require_agent_access(principal, agent_id, "compile")
    reader = deps.store.reader()
    key = reader.get_context_key(principal.tenant, agent_id)
    if key is None:
        raise agent_not_found(agent_id)
    hit = deps.contexts.get(agent_id, key)
    if hit is None:
        hit = _assemble(deps, principal, agent_id, settings)
        if hit is not None:
            deps.contexts.put(agent_id, key, hit)
    if hit is not None:
        deps.count_compile(hit=True)
    return hit


def _assemble(
    deps: Deps, principal: Principal, agent_id: str, settings: ContextSettings
) -> CompiledContext | None:
    reader = deps.store.reader()
    state = reader.get_prompt_state(principal.tenant, agent_id)
    if state is None:
        raise agent_not_found(agent_id)
    prompt = _usable(state, deps)
    if prompt is None:
        return None
    window = deps.windows.load(
        reader, principal.tenant, agent_id, state.context_version, deps.counter
    )
    skills = _skills(deps, state)
    if prompt.memory_revision == state.memory_revision:
        return _result(prompt, state, window, settings, hit=True, skills=skills)
    # MESSAGE mode after a memory change: keep the stored prompt; until a step acknowledges
    # the new revision, hand the fresh memory to the turn as a separate update.
    fresh = deps.fresh_memory.get(deps, reader, principal.tenant, agent_id, state.memory_revision)
    delivered = state.delivered_revision >= state.memory_revision
    return _result(
        prompt,
        state,
        window,
        settings,
        hit=True,
        memory=(fresh.memory, fresh.memory_tokens),
        update=("", 0) if delivered else (fresh.update, fresh.update_tokens),
        skills=skills,
    )


def recompile_context(
    deps: Deps, principal: Principal, agent_id: str, settings: ContextSettings
) -> CompiledContext:
    """Compiles the prompt afresh from the agent's current state and persists it."""
    access.require_agent_access(principal, agent_id, "compile")
    deps.count_compile(hit=False)
    now = deps.clock()
    with deps.store.transaction() as tx:
        agent = tx.get_agent(principal.tenant, agent_id)
        if agent is None:
            raise agent_not_found(agent_id)
        state = tx.get_prompt_state(principal.tenant, agent_id)
        assert state is not None
        prompt = deps.build_prompt(agent, now)
        tx.save_prompts([prompt])
        tools_tokens, tools_json = state.tools_tokens, state.tools_json
        if state.tools_counter != deps.counter.name:
            # The server's tokenizer changed since the tools were counted.
            payload = deps.tools_payload(agent)
            tools_tokens, tools_json = payload.tokens, payload.json
            tx.update_agent(agent, payload)
        tx.emit(rebuild_events([agent], [prompt], now))
        window = deps.windows.load(
            tx, principal.tenant, agent_id, agent.context_version, deps.counter
        )
    fresh = PromptState(
        agent_id=agent.id,
        system_hash=prompt.raw_hash,
        memory_revision=agent.memory_revision,
        memory_update_mode=agent.memory_update_mode,
        context_window=agent.context_window,
        tools_tokens=tools_tokens,
        tools_counter=deps.counter.name,
        prompt=prompt,
        context_version=agent.context_version,
        delivered_revision=agent.delivered_revision,
        tools_json=tools_json,
        memory_head=agent.memory_head,
    )
    return _result(prompt, fresh, window, settings, hit=False, skills=_skills(deps, fresh))


def compile_context(
    deps: Deps,
    principal: Principal,
    agent_id: str,
    force: bool = False,
    settings: ContextSettings = ContextSettings(),
) -> CompiledContext:
    """The agent's context for its next model call (cached when possible)."""
    cached = None if force else cached_context(deps, principal, agent_id, settings)
    return cached if cached is not None else recompile_context(deps, principal, agent_id, settings)


def _result(
    prompt: StoredPrompt,
    state: PromptState,
    window: Window,
    settings: ContextSettings,
    *,
    hit: bool,
    memory: tuple[str, int] | None = None,
    update: tuple[str, int] = ("", 0),
    skills: str = "",
) -> CompiledContext:
    memory_text, memory_tokens = memory or (prompt.compiled_memory, prompt.memory_tokens)
    total = prompt.system_tokens + state.tools_tokens + window.tokens + update[1]
    tokens = TokenAccount(
        context_window=state.context_window,
        system=prompt.system_tokens,
        memory=memory_tokens,
        tools=state.tools_tokens,
        messages=window.tokens,
        total=total,
    )
    return CompiledContext(
        agent_id=state.agent_id,
        system_prompt=prompt.system_prompt,
        compiled_memory=memory_text,
        memory_revision=state.revision,
        prompt_hash=prompt.prompt_hash,
        tokens=tokens,
        cache_hit=hit,
        memory_update=update[0],
        status=_status(tokens, settings),
        messages=window.messages,
        tools_json=state.tools_json,
        context_version=state.context_version,
        available_skills=skills,
    )
