"""ExecuteMemoryTool: a model's memory tool call, applied to the agent's blocks."""

from __future__ import annotations

from dataclasses import dataclass, field

from cairn_server.auth import Principal
from state_service import access
from state_service.blocks import change_block
from state_service.core import Deps, agent_not_found
from state_service.memfs.files import with_body
from state_service.memfs.service import commit_tree, file_blocks
from state_service.memory_tools import Done, Edit, RecallCall, Refusal, ToolError, plan_call
from state_service.models import Block, MemoryMode

RECALL_NOT_CONFIGURED = (
    "Error: {tool} needs the recall service, which is not configured on this server; "
    "nothing was stored or searched."
)


@dataclass(frozen=True, slots=True)
class ToolResult:
    """The text for the model, and what changed."""

    ok: bool
    text: str
    error: ToolError | None = None
    block: Block | None = None
    rebuilt_agent_ids: list[str] = field(default_factory=list)
    memory_revision: str = ""


@dataclass(frozen=True, slots=True)
class NeedsRecall:
    """The call is for the recall service; `agent_revision` is the agent's memory revision."""

    call: RecallCall
    memory_revision: str


def execute_memory_tool(
    deps: Deps, principal: Principal, agent_id: str, tool_name: str, arguments_json: str
) -> ToolResult | NeedsRecall:
    """Runs a block-editing tool in one transaction; recall tools are handed back."""
    access.require_agent_access(principal, agent_id, "run memory tools for")
    now = deps.clock()
    with deps.store.transaction() as tx:
        agent = tx.get_agent(principal.tenant, agent_id)
        if agent is None:
            raise agent_not_found(agent_id)
        memfs = agent.memory_mode is MemoryMode.MEMFS
        files = deps.snapshots().get(agent.id, agent.memory_head).files if memfs else {}
        blocks = file_blocks(files) if memfs else agent.blocks
        outcome = plan_call(tool_name, arguments_json, blocks)
        if isinstance(outcome, RecallCall):
            return NeedsRecall(outcome, agent.revision)
        if isinstance(outcome, Refusal):
            return ToolResult(False, outcome.text, outcome.error, memory_revision=agent.revision)
        if isinstance(outcome, Done):
            return ToolResult(True, outcome.text, memory_revision=agent.revision)
        assert isinstance(outcome, Edit)
        if memfs:
            # The edit becomes a commit with the agent as author and its reason as message.
            path = f"system/{outcome.label}.md"
            new_files = {p: f.content for p, f in files.items()}
            new_files[path] = with_body(files[path], outcome.new_value)
            committed = commit_tree(
                deps,
                tx,
                agent,
                new_files,
                outcome.reason or f"{tool_name}: {path}",
                agent.id,
                now,
            )
            return ToolResult(
                True,
                outcome.text,
                rebuilt_agent_ids=[agent.id] if committed.prompt_rebuilt else [],
                memory_revision=committed.revision,
            )
        block = next(b for b in agent.blocks if b.label == outcome.label)
        attached = tx.agent_ids_with_block(principal.tenant, block.id)
        result = change_block(deps, tx, block, attached, {"value": outcome.new_value}, now)
        revision = agent.memory_revision + (1 if result.affected_agent_ids else 0)
        return ToolResult(
            True,
            outcome.text,
            block=result.block,
            rebuilt_agent_ids=result.rebuilt_agent_ids,
            memory_revision=str(revision),
        )


def recall_not_configured(call: RecallCall, memory_revision: str) -> ToolResult:
    """The refusal for recall tools on a server without a recall service."""
    return ToolResult(
        False,
        RECALL_NOT_CONFIGURED.format(tool=call.tool),
        ToolError.RECALL_NOT_CONFIGURED,
        memory_revision=memory_revision,
    )
