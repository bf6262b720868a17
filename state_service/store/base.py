"""The `StateStore` interface. Domain code sees only this; only stores see SQL.

Reads go through `reader()`. Every change runs in `transaction()`, a unit of work that
commits all of its writes and then publishes its events, or rolls everything back. Both
the SQLite and the PostgreSQL store implement it, so nothing above changes between them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Protocol

from state_service.models import (
    Agent,
    AgentEvent,
    Block,
    CompactionPlan,
    Forward,
    Message,
    PromptState,
    StepRecord,
    StoredPrompt,
    ToolsPayload,
)


class StateReader(Protocol):
    """Queries; every one is scoped to a tenant."""

    def get_agent(self, tenant: str, agent_id: str) -> Agent | None:
        """The agent with its blocks in render order, or None."""

    def get_agent_row(self, tenant: str, agent_id: str) -> Agent | None:
        """The agent's own fields only: no blocks, an empty `message_ids`."""

    def load_agents(
        self, tenant: str, agent_ids: Sequence[str], windows: bool = True
    ) -> list[Agent]:
        """Agents with their blocks, in the order of `agent_ids` (missing ones skipped);
        without `windows`, their `message_ids` stay empty."""

    def list_agents(
        self,
        tenant: str,
        *,
        after: int,
        limit: int,
        tags: Sequence[str],
        match_all_tags: bool,
        name: str,
    ) -> list[tuple[int, Agent]]:
        """Up to `limit` agents with row keys above `after`, in creation order."""

    def get_block(self, tenant: str, block_id: str) -> Block | None:
        """The block, or None."""

    def list_blocks(
        self,
        tenant: str,
        *,
        after: int,
        limit: int,
        label: str,
        tags: Sequence[str],
        match_all_tags: bool,
    ) -> list[tuple[int, Block]]:
        """Up to `limit` blocks with row keys above `after`, in creation order."""

    def get_prompt_state(self, tenant: str, agent_id: str) -> PromptState | None:
        """The compile cache's keys and entry for one agent, in one read."""

    def get_context_key(self, tenant: str, agent_id: str) -> tuple[object, ...] | None:
        """Everything a compiled context depends on, without its texts: equal keys mean an
        equal context, so a cached one can be served after this one light read."""

    def agent_ids_with_block(self, tenant: str, block_id: str) -> list[str]:
        """Ids of the agents the block is attached to."""

    def window(self, tenant: str, agent_id: str, counter: str) -> list[Message]:
        """The in-context messages in order; the system message carries the stored prompt.

        A message counted by another tokenizer than `counter` comes back with tokens = -1.
        """

    def get_messages(self, tenant: str, message_ids: Sequence[str]) -> list[Message]:
        """Messages by id, in the order given (unknown ids skipped)."""

    def list_messages(
        self,
        tenant: str,
        agent_id: str,
        *,
        after: int,
        limit: int,
        roles: Sequence[str],
        start: float | None,
        end: float | None,
        newest_first: bool,
    ) -> list[tuple[int, Message]]:
        """A page of an agent's history; `after` is the last row key seen (0 to start)."""

    def get_step(self, agent_id: str, step_id: str) -> StepRecord | None:
        """A committed step, or None."""

    def get_plan(self, tenant: str, plan_id: str) -> CompactionPlan | None:
        """A compaction plan, or None."""

    def revision_counter(self, agent_id: str, revision: str) -> int | None:
        """The memory counter of a MEMFS revision (commit id), or None."""

    def pending_forwards(self, limit: int) -> list[Forward]:
        """The oldest messages waiting to be forwarded to recall (not given up on)."""


class StateTx(StateReader, Protocol):
    """Writes inside one transaction."""

    def insert_block(self, block: Block) -> None:
        """Stores a new block."""

    def update_block(self, block: Block) -> None:
        """Overwrites a block's fields (the caller has bumped its version)."""

    def delete_block(self, tenant: str, block_id: str) -> None:
        """Deletes a block and its attachments."""

    def insert_agent(self, agent: Agent, tools: ToolsPayload) -> None:
        """Stores a new agent (not its block attachments or window)."""

    def update_agent(self, agent: Agent, tools: ToolsPayload) -> None:
        """Overwrites an agent's own fields (not its block attachments or window)."""

    def delete_agent(self, tenant: str, agent_id: str) -> None:
        """Deletes an agent with its attachments, prompt, window and history."""

    def set_agent_blocks(self, agent_id: str, block_ids: Sequence[str]) -> None:
        """Replaces the agent's attachments with `block_ids`, in render order."""

    def bump_memory(
        self, tenant: str, agent_ids: Sequence[str], now: float, bump_version: bool
    ) -> None:
        """Increments memory_revision (and optionally version) of many agents at once."""

    def set_context(
        self,
        tenant: str,
        agent_id: str,
        *,
        context_version: int,
        message_count: int,
        delivered_revision: int,
    ) -> None:
        """Records a new window version and history size."""

    def set_memory_head(
        self, tenant: str, agent_id: str, head: str, counter: int, now: float
    ) -> None:
        """Moves a MEMFS agent to a new commit and records its counter."""

    def add_archival(self, tenant: str, agent_id: str, count: int) -> None:
        """Counts archival records written for the agent."""

    def save_prompts(self, prompts: Sequence[StoredPrompt]) -> None:
        """Stores compiled prompts, replacing earlier ones."""

    def insert_messages(self, tenant: str, messages: Sequence[Message], counter: str) -> None:
        """Appends messages to history."""

    def append_window(self, agent_id: str, start: int, message_ids: Sequence[str]) -> None:
        """Adds messages at positions start, start+1, ... of the window."""

    def set_window(self, agent_id: str, message_ids: Sequence[str]) -> None:
        """Replaces the whole window."""

    def enqueue_forwards(self, tenant: str, agent_id: str, message_ids: Sequence[str]) -> None:
        """Queues messages for the recall service, in the step's transaction."""

    def drop_forwards(self, ids: Sequence[int]) -> None:
        """Removes forwarded messages from the queue."""

    def note_forward_failure(
        self, ids: Sequence[int], error: str, give_up: bool, now: float
    ) -> None:
        """Records a failed attempt; a permanent failure stops further attempts."""

    def insert_step(self, step: StepRecord) -> None:
        """Records a committed step."""

    def insert_plan(self, plan: CompactionPlan) -> None:
        """Stores a compaction plan."""

    def mark_plan_applied(self, plan_id: str, now: float) -> None:
        """Marks a plan applied."""

    def emit(self, events: Sequence[AgentEvent]) -> None:
        """Queues events to publish once the transaction commits."""


class StateStore(Protocol):
    """A state store: readers for queries, transactions for changes."""

    def reader(self) -> StateReader:
        """Queries, on a connection the calling thread may use."""

    def set_publisher(self, publish: Callable[[list[AgentEvent]], None]) -> None:
        """Where committed events go (the server's event hub)."""

    def transaction(self) -> AbstractContextManager[StateTx]:
        """A unit of work: commits on normal exit, rolls back on an exception."""

    def close(self) -> None:
        """Releases connections."""
