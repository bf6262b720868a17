"""Building stored prompts for agents, one at a time or in one batch."""

from __future__ import annotations

import json
from collections.abc import Sequence

from state_service.compile import (
    assemble_system_prompt,
    compile_memory,
    render_memory_metadata,
    sha256_hex,
)
from state_service.models import Agent, AgentEvent, EventKind, StoredPrompt, Tool
from state_service.tokens import TokenCounter


def tool_schemas(tools: Sequence[Tool]) -> list[dict[str, object]]:
    """The tools as an OpenAI-style `tools` array."""
    return [
        {
            "type": "function",
            "function": {
                "name": tool.name,
                "description": tool.description,
                "parameters": json.loads(tool.parameters_json),
            },
        }
        for tool in tools
    ]


def tools_json(tools: Sequence[Tool]) -> str:
    """The `tools` array as compact JSON, exactly as counted for the token account."""
    return json.dumps(tool_schemas(tools), separators=(",", ":"), ensure_ascii=False)


def build_prompt(
    agent: Agent,
    counter: TokenCounter,
    now: float,
    recall_messages: int = 0,
    archival_records: int = 0,
) -> StoredPrompt:
    """Compiles the agent's system prompt and counts its tokens."""
    memory = compile_memory(agent.blocks, agent.memory_mode, agent.tool_rules)
    metadata = render_memory_metadata(
        agent.id, agent.memory_updated_at, recall_messages, archival_records
    )
    system_prompt = assemble_system_prompt(agent.system, memory, metadata)
    return StoredPrompt(
        agent_id=agent.id,
        system_prompt=system_prompt,
        compiled_memory=memory,
        raw_hash=sha256_hex(agent.system),
        memory_revision=agent.memory_revision,
        prompt_hash=sha256_hex(system_prompt),
        system_tokens=counter.count(system_prompt),
        memory_tokens=counter.count(memory),
        counter=counter.name,
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
