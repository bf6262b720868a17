"""Building stored prompts for agents, one at a time or in one batch."""

from __future__ import annotations

import json
from collections.abc import Sequence

from state_service.compile import (
    memory_parts,
    render_memory_metadata,
    sha256_hex,
    system_prompt_parts,
)
from state_service.memory_tools import MEMORY_TOOLS
from state_service.models import Agent, AgentEvent, EventKind, StoredPrompt, Tool
from state_service.tokens import CachedCounts


def tool_schemas(tools: Sequence[Tool]) -> list[dict[str, object]]:
    """The agent's tools, then the memory tools, as an OpenAI-style `tools` array."""
    own: list[dict[str, object]] = [
        {
            "name": tool.name,
            "description": tool.description,
            "parameters": json.loads(tool.parameters_json),
        }
        for tool in tools
    ]
    return [{"type": "function", "function": f} for f in [*own, *MEMORY_TOOLS]]


def tools_json(tools: Sequence[Tool]) -> str:
    """The `tools` array as compact JSON, exactly as counted for the token account."""
    return json.dumps(tool_schemas(tools), separators=(",", ":"), ensure_ascii=False)


def build_prompt(
    agent: Agent, counts: CachedCounts, now: float, memory: list[str] | None = None
) -> StoredPrompt:
    """Compiles the agent's system prompt and counts its tokens.

    `memory` is the rendered memory of a MEMFS agent (its committed files); block-based
    agents render their blocks. With an additive counter the prompt is counted piece by
    piece, each piece through the cache; otherwise the whole text is counted.
    """
    if memory is None:
        memory = memory_parts(agent.blocks, agent.memory_mode, agent.tool_rules)
        modified: float | None = agent.memory_updated_at
    else:
        # A MEMFS revision's history is in git; a time here would make a revert differ.
        modified = None
    metadata = render_memory_metadata(agent.id, modified, agent.recall_count, agent.archival_count)
    parts = system_prompt_parts(agent.system, memory, metadata)
    system_prompt = "".join(parts)
    compiled_memory = "".join(memory)
    if counts.counter.additive:
        memory_tokens = sum(counts.count(part) for part in memory)
        system_tokens = sum(counts.count(part) for part in parts)
    else:
        memory_tokens = counts.counter.count(compiled_memory)
        system_tokens = counts.counter.count(system_prompt)
    return StoredPrompt(
        agent_id=agent.id,
        system_prompt=system_prompt,
        compiled_memory=compiled_memory,
        raw_hash=sha256_hex(agent.system),
        memory_revision=agent.memory_revision,
        prompt_hash=sha256_hex(system_prompt),
        system_tokens=system_tokens,
        memory_tokens=memory_tokens,
        counter=counts.counter.name,
        built_at=now,
    )


def rebuild_events(
    agents: Sequence[Agent], prompts: Sequence[StoredPrompt], now: float
) -> list[AgentEvent]:
    """PROMPT_REBUILT events for freshly built prompts."""
    return [
        AgentEvent(
            kind=EventKind.PROMPT_REBUILT,
            tenant=agent.tenant,
            agent_id=agent.id,
            memory_revision=agent.revision,
            context_version=agent.context_version,
            agent_version=agent.version,
            time=now,
            prompt_hash=prompt.prompt_hash,
        )
        for agent, prompt in zip(agents, prompts, strict=True)
    ]
