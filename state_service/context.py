"""CompileContext: the stored prompt on a cache hit, a persisted recompilation otherwise."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from cairn_server.auth import Principal
from state_service import access
from state_service.agents import agent_not_found
from state_service.compile import compile_memory, format_memory_update
from state_service.core import Deps
from state_service.models import MemoryUpdateMode, PromptState, StoredPrompt
from state_service.prompts import build_prompt, rebuild_events


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

    system_prompt: str
    compiled_memory: str
    memory_revision: str
    prompt_hash: str
    tokens: TokenAccount
    cache_hit: bool
    memory_update: str
    status: ContextStatus


@dataclass(frozen=True, slots=True)
class ContextSettings:
    """Server-wide settings of context accounting."""

    compaction_threshold: float = 0.9


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


def cached_context(
    deps: Deps, principal: Principal, agent_id: str, settings: ContextSettings
) -> CompiledContext | None:
    """The context from the stored prompt, or None when it must be recompiled (reads only)."""
    access.require_agent_access(principal, agent_id, "compile")
    reader = deps.store.reader()
    state = reader.get_prompt_state(principal.tenant, agent_id)
    if state is None:
        raise agent_not_found(agent_id)
    prompt = _usable(state, deps)
    if prompt is None:
        return None
    if prompt.memory_revision == state.memory_revision:
        return _result(
            prompt, prompt.compiled_memory, prompt.memory_tokens, "", True, state, settings
        )
    # MESSAGE mode after a memory change: keep the stored prompt, send the fresh memory.
    agent = reader.get_agent(principal.tenant, agent_id)
    if agent is None:
        raise agent_not_found(agent_id)
    memory = compile_memory(agent.blocks, agent.memory_mode, agent.tool_rules)
    update = format_memory_update(memory, agent.revision)
    return _result(
        prompt,
        memory,
        deps.counter.count(memory),
        update,
        True,
        state,
        settings,
        revision=agent.revision,
        update_tokens=deps.counter.count(update),
    )


def recompile_context(
    deps: Deps, principal: Principal, agent_id: str, settings: ContextSettings
) -> CompiledContext:
    """Compiles the prompt afresh from the agent's current state and persists it."""
    access.require_agent_access(principal, agent_id, "compile")
    now = deps.clock()
    with deps.store.transaction() as tx:
        agent = tx.get_agent(principal.tenant, agent_id)
        if agent is None:
            raise agent_not_found(agent_id)
        state = tx.get_prompt_state(principal.tenant, agent_id)
        assert state is not None
        prompt = build_prompt(agent, deps.counts, now)
        tx.save_prompts([prompt])
        tools_tokens = state.tools_tokens
        if state.tools_counter != deps.counter.name:
            # The server's tokenizer changed since the tools were counted.
            tools_tokens = deps.tools_tokens(agent)
            tx.update_agent(agent, tools_tokens, deps.counter.name)
        tx.emit(rebuild_events([agent], [prompt], now))
    fresh = PromptState(
        agent_id=agent.id,
        system_hash=prompt.raw_hash,
        memory_revision=agent.memory_revision,
        memory_update_mode=agent.memory_update_mode,
        context_window=agent.context_window,
        tools_tokens=tools_tokens,
        tools_counter=deps.counter.name,
        prompt=prompt,
    )
    return _result(prompt, prompt.compiled_memory, prompt.memory_tokens, "", False, fresh, settings)


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
    memory: str,
    memory_tokens: int,
    update: str,
    hit: bool,
    state: PromptState,
    settings: ContextSettings,
    *,
    revision: str | None = None,
    update_tokens: int = 0,
) -> CompiledContext:
    total = prompt.system_tokens + state.tools_tokens + update_tokens
    tokens = TokenAccount(
        context_window=state.context_window,
        system=prompt.system_tokens,
        memory=memory_tokens,
        tools=state.tools_tokens,
        messages=0,
        total=total,
    )
    return CompiledContext(
        system_prompt=prompt.system_prompt,
        compiled_memory=memory,
        memory_revision=revision if revision is not None else str(prompt.memory_revision),
        prompt_hash=prompt.prompt_hash,
        tokens=tokens,
        cache_hit=hit,
        memory_update=update,
        status=_status(tokens, settings),
    )
