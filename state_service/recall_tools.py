"""The memory tools the recall service answers: archival memory and conversation search."""

from __future__ import annotations

import uuid

from cairn_server.auth import Principal
from cairn_server.runner import Runner
from state_service.core import Deps
from state_service.memory_tools import RecallCall, ToolError
from state_service.recall_link import RecallError, RecallLink
from state_service.tool_calls import ToolResult, recall_not_configured

SEARCH_UNAVAILABLE = (
    "Error: {tool} is not available: the recall service this server uses has no search; "
    "nothing was searched."
)


async def run_recall_tool(
    deps: Deps,
    runner: Runner,
    link: RecallLink | None,
    principal: Principal,
    agent_id: str,
    call: RecallCall,
    memory_revision: str,
) -> ToolResult:
    """Runs a recall tool call for the agent; failures are refusals the model can read."""
    if link is None or not link.credentials.serves(principal.tenant):
        return recall_not_configured(call, memory_revision)
    if call.tool == "archival_memory_insert":
        content = str(call.arguments["content"])
        if not content.strip():
            return ToolResult(
                False,
                "Error: archival_memory_insert needs a non-empty 'content'; nothing was stored.",
                ToolError.INVALID_ARGUMENTS,
                memory_revision=memory_revision,
            )
        tags = [str(tag) for tag in call.arguments.get("tags") or []]
        try:
            seq = await link.archival_insert(
                principal.tenant, agent_id, content, tags, f"archival-{uuid.uuid4()}"
            )
        except RecallError as error:
            return ToolResult(
                False,
                f"Error: the recall service could not store the passage ({error.code.name}: "
                f"{error.details}); nothing was stored. Try again later.",
                ToolError.RECALL_FAILED,
                memory_revision=memory_revision,
            )
        await runner.write(_count_archival, deps, principal.tenant, agent_id)
        return ToolResult(
            True,
            f"Stored the passage in archival memory (record {seq} of your archival stream).",
            memory_revision=memory_revision,
        )
    return ToolResult(
        False,
        SEARCH_UNAVAILABLE.format(tool=call.tool),
        ToolError.RECALL_FAILED,
        memory_revision=memory_revision,
    )


def _count_archival(deps: Deps, tenant: str, agent_id: str) -> None:
    with deps.store.transaction() as tx:
        tx.add_archival(tenant, agent_id, 1)
