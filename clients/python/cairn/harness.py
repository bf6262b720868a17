"""A reference agent loop: any OpenAI-compatible chat-completions endpoint, Cairn for state.

Each step compiles the agent's context, calls the model, runs the memory tools it asked
for through the state service (their edits are durable at once), and commits the step's
messages. When the context needs compaction the harness asks the same model for a summary
and applies it. Nothing of a step enters the window unless the step commits.

    client = cairn.Client("127.0.0.1:50051", api_key="ck_...")
    harness = Harness(client, base_url="http://localhost:8000/v1", model="gpt-4o-mini")
    reply = harness.run_turn(agent_id, "Hi, I'm Sam and I love tea.")

Calls to the state service go through `cairn.Client`: deadlines, typed errors, and retries of
the calls that are safe to repeat (compiling, and committing the step, whose id the client
keeps across attempts so that a step is committed once).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import grpc
import httpx

from cairn.client import Client
from cairn.enums import ContextStatus, ContextView, MessageRole
from cairn.errors import FailedPrecondition
from cairn.state_types import CompiledContext, Message, ToolCall

# Memory tools the state service runs; any other tool goes to `tool_executor`.
MEMORY_TOOLS = frozenset(
    {
        "core_memory_append",
        "core_memory_replace",
        "memory_replace",
        "memory_insert",
        "memory_rethink",
        "memory_finish_edits",
        "archival_memory_insert",
        "archival_memory_search",
        "conversation_search",
    }
)
SUMMARY_PROMPT = (
    "You are compacting an agent's conversation. Summarise the messages below so that the "
    "agent can continue the conversation without them: keep names, facts, decisions, open "
    "questions and commitments; drop pleasantries. Answer with the summary only."
)


class HarnessError(Exception):
    """The turn could not continue; the message says why."""


@dataclass
class TurnResult:
    """What one turn did."""

    reply: str
    steps: int
    tool_calls: list[str] = field(default_factory=list)
    compactions: int = 0
    finished: bool = True


def to_openai(message: Message) -> dict[str, Any]:
    """A window message in OpenAI's chat format."""
    role = message.role
    if role is MessageRole.SUMMARY:
        return {
            "role": "system",
            "content": "Summary of the earlier conversation, whose messages were moved out "
            f"of your context:\n{message.content}",
        }
    if role is MessageRole.TOOL:
        return {"role": "tool", "tool_call_id": message.tool_call_id, "content": message.content}
    out: dict[str, Any] = {"role": str(role), "content": message.content}
    if message.name and role is MessageRole.USER:
        out["name"] = message.name
    if message.tool_calls:
        out["content"] = message.content or None
        out["tool_calls"] = [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments_json},
            }
            for call in message.tool_calls
        ]
    return out


class Harness:
    """Runs turns of Cairn agents against an OpenAI-compatible endpoint."""

    def __init__(
        self,
        state: Client | grpc.Channel,
        *,
        api_key: str | None = None,
        base_url: str,
        model: str,
        llm_api_key: str | None = None,
        tool_executor: Callable[[str, str], str] | None = None,
        max_steps: int = 8,
        http: httpx.Client | None = None,
        timeout: float = 60.0,
    ) -> None:
        """`state` is a `cairn.Client` that reaches the state service, or a channel to it
        called with `api_key`; `base_url` ends in `/v1`. `tool_executor(name,
        arguments_json)` runs non-memory tools and returns their result text."""
        if isinstance(state, Client):
            if api_key is not None:
                raise ValueError("the client carries its own API key: pass api_key to cairn.Client")
            self._client = state
        else:
            self._client = Client.from_channels(state=state, api_key=api_key)
        self._url = base_url.rstrip("/") + "/chat/completions"
        self._model = model
        self._headers = {"authorization": f"Bearer {llm_api_key}"} if llm_api_key else {}
        self._tools = tool_executor
        self._max_steps = max_steps
        self._http = http or httpx.Client(timeout=timeout)

    def _chat(self, messages: list[dict[str, Any]], tools: list[Any] | None) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self._model, "messages": messages}
        if tools:
            body["tools"] = tools
        response = self._http.post(self._url, json=body, headers=self._headers)
        if response.status_code != 200:
            raise HarnessError(
                f"the model endpoint answered {response.status_code}: {response.text[:200]}"
            )
        choice: dict[str, Any] = response.json()["choices"][0]["message"]
        return choice

    def compact(self, agent_id: str) -> bool:
        """Summarises the oldest messages with the model; False when nothing was compacted."""
        try:
            plan = self._client.state.plan_compaction(agent_id)
        except FailedPrecondition:
            return False
        transcript = "\n".join(
            f"{m.role}: {m.content}"
            + "".join(f" [calls {c.name}({c.arguments_json})]" for c in m.tool_calls)
            for m in plan.messages
        )
        summary = (
            self._chat(
                [
                    {"role": "system", "content": SUMMARY_PROMPT},
                    {"role": "user", "content": transcript},
                ],
                None,
            ).get("content")
            or ""
        )
        if not summary.strip():
            raise HarnessError("the model returned an empty summary")
        self._client.state.apply_compaction(agent_id, plan.plan_id, summary)
        return True

    def _compile(self, agent_id: str) -> CompiledContext:
        # The prompt view leaves out compiled_memory, which the system prompt already holds.
        return self._client.state.compile_context(agent_id, view=ContextView.PROMPT)

    def _run_tool(self, agent_id: str, name: str, arguments: str) -> str:
        if name in MEMORY_TOOLS:
            return self._client.state.execute_memory_tool(agent_id, name, arguments).result
        if self._tools is None:
            return f"Error: the tool `{name}` is not available in this harness."
        return self._tools(name, arguments)

    def run_turn(self, agent_id: str, user_message: str) -> TurnResult:
        """One user message in, steps until the model answers without calling tools."""
        pending: list[Message] = [Message.user(user_message)]
        result = TurnResult(reply="", steps=0)
        for _ in range(self._max_steps):
            context = self._compile(agent_id)
            if context.status is ContextStatus.CONTEXT_WINDOW_OVERFLOW_IN_SYSTEM_PROMPT:
                raise HarnessError(
                    f"agent {agent_id}: the system prompt alone ({context.tokens.system} tokens) "
                    f"exceeds the context window ({context.tokens.context_window})"
                )
            if context.status is ContextStatus.NEEDS_COMPACTION and self.compact(agent_id):
                result.compactions += 1
                context = self._compile(agent_id)
            step = list(pending)
            if context.memory_update:
                step.insert(0, Message.system(context.memory_update))
            messages = [{"role": "system", "content": context.system_prompt}]
            messages += [to_openai(m) for m in context.messages]
            messages += [to_openai(m) for m in step]
            choice = self._chat(messages, list(context.tools))
            calls = tuple(
                ToolCall(
                    id=call.get("id") or f"call-{uuid.uuid4().hex[:12]}",
                    name=call["function"]["name"],
                    arguments_json=call["function"].get("arguments") or "{}",
                )
                for call in choice.get("tool_calls") or []
            )
            step.append(Message.assistant(choice.get("content") or "", calls))
            for call in calls:
                output = self._run_tool(agent_id, call.name, call.arguments_json)
                step.append(Message.tool(output, tool_call_id=call.id, name=call.name))
                result.tool_calls.append(call.name)
            self._client.state.commit_step(
                agent_id,
                step,
                base_context_version=context.context_version,
                acknowledged_memory_revision=(
                    context.memory_revision if context.memory_update else ""
                ),
            )
            result.steps += 1
            pending = []
            if not calls:
                result.reply = choice.get("content") or ""
                return result
        result.finished = False
        return result
