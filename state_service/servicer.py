"""The StateService servicer: protobuf in, domain call, protobuf out. Nothing else."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import AsyncIterator
from typing import Any

import grpc

from cairn.v1 import state_pb2, state_pb2_grpc
from cairn_server.errors import NotFound, ResourceExhausted
from cairn_server.rpc import RpcGuard
from cairn_server.runner import Runner
from state_service import agents, blocks, compaction, convert, portability, steps
from state_service.agents import AgentSpec
from state_service.context import (
    CompiledContext,
    ContextSettings,
    cached_context,
    recompile_context,
)
from state_service.core import Deps
from state_service.events import EventHub
from state_service.memfs import service as memfs
from state_service.models import AGENT_UPDATABLE, BLOCK_UPDATABLE, EventKind
from state_service.recall_link import Forwarder, RecallLink
from state_service.recall_tools import run_recall_tool
from state_service.tool_calls import NeedsRecall, execute_memory_tool

Ctx = grpc.aio.ServicerContext[Any, Any]


def _expected(request: object) -> int | None:
    if request.HasField("expected_version"):  # type: ignore[attr-defined]
        return int(request.expected_version)  # type: ignore[attr-defined]
    return None


class StateServicer(state_pb2_grpc.StateServiceServicer):
    """Maps each RPC onto the domain functions of the state service."""

    def __init__(
        self,
        deps: Deps,
        guard: RpcGuard,
        runner: Runner,
        hub: EventHub,
        context_settings: ContextSettings,
        recall: RecallLink | None = None,
        forwarder: Forwarder | None = None,
    ) -> None:
        self.deps = deps
        self.guard = guard
        self.run = runner
        self.hub = hub
        self.context_settings = context_settings
        self.recall = recall
        self.forwarder = forwarder
        self._responses: OrderedDict[tuple[object, ...], state_pb2.CompileContextResponse] = (
            OrderedDict()
        )

    def _compile_response(
        self, result: CompiledContext, view: int
    ) -> state_pb2.CompileContextResponse:
        # Equal cache keys give equal responses, so a converted response is reused as is.
        key = (*result.cache_key, view)
        response = self._responses.get(key)
        if response is None:
            response = convert.compile_response(
                result, with_memory=view != state_pb2.CONTEXT_VIEW_PROMPT
            )
            self._responses[key] = response
            if len(self._responses) > 1024:
                self._responses.popitem(last=False)
        return response

    async def CreateAgent(
        self, request: state_pb2.CreateAgentRequest, context: Ctx
    ) -> state_pb2.CreateAgentResponse:
        async with self.guard.call(context, "CreateAgent") as principal:
            spec = AgentSpec(
                name=request.name,
                system=request.system,
                model=request.model,
                context_window=request.context_window,
                memory_blocks=[convert.block_from_pb(b) for b in request.memory_blocks],
                block_ids=list(request.block_ids),
                tools=[convert.tool_from_pb(t) for t in request.tools],
                tool_rules=[
                    convert.rule_from_pb(f"tool_rules[{i}]", r)
                    for i, r in enumerate(request.tool_rules)
                ],
                tags=list(request.tags),
                metadata=convert.struct_to_dict(request.metadata),
                memory_mode=convert.memory_mode(request.memory_mode),
                memory_update_mode=convert.update_mode(
                    "memory_update_mode", request.memory_update_mode
                ),
            )
            agent = await self.run.write(agents.create_agent, self.deps, principal, spec)
            return state_pb2.CreateAgentResponse(agent=convert.agent_to_pb(agent))
        raise AssertionError("unreachable")

    async def GetAgent(
        self, request: state_pb2.GetAgentRequest, context: Ctx
    ) -> state_pb2.GetAgentResponse:
        async with self.guard.call(context, "GetAgent") as principal:
            agent = await self.run.read(agents.get_agent, self.deps, principal, request.agent_id)
            return state_pb2.GetAgentResponse(agent=convert.agent_to_pb(agent))
        raise AssertionError("unreachable")

    async def ListAgents(
        self, request: state_pb2.ListAgentsRequest, context: Ctx
    ) -> state_pb2.ListAgentsResponse:
        async with self.guard.call(context, "ListAgents") as principal:
            found, token = await self.run.read(
                agents.list_agents,
                self.deps,
                principal,
                page_size=request.page_size,
                page_token=request.page_token,
                tags=list(request.tags),
                match_all_tags=request.match_all_tags,
                name=request.name,
            )
            return state_pb2.ListAgentsResponse(
                agents=[convert.agent_to_pb(a) for a in found], next_page_token=token
            )
        raise AssertionError("unreachable")

    async def UpdateAgent(
        self, request: state_pb2.UpdateAgentRequest, context: Ctx
    ) -> state_pb2.UpdateAgentResponse:
        async with self.guard.call(context, "UpdateAgent") as principal:
            paths = convert.mask_paths(list(request.update_mask.paths), AGENT_UPDATABLE)
            changes = convert.agent_changes(request.agent, paths)
            agent, rebuilt = await self.run.write(
                agents.update_agent,
                self.deps,
                principal,
                request.agent.id,
                changes,
                _expected(request),
            )
            return state_pb2.UpdateAgentResponse(
                agent=convert.agent_to_pb(agent), prompt_rebuilt=rebuilt
            )
        raise AssertionError("unreachable")

    async def DeleteAgent(
        self, request: state_pb2.DeleteAgentRequest, context: Ctx
    ) -> state_pb2.DeleteAgentResponse:
        async with self.guard.call(context, "DeleteAgent") as principal:
            await self.run.write(
                agents.delete_agent, self.deps, principal, request.agent_id, _expected(request)
            )
            return state_pb2.DeleteAgentResponse()
        raise AssertionError("unreachable")

    async def CreateBlock(
        self, request: state_pb2.CreateBlockRequest, context: Ctx
    ) -> state_pb2.CreateBlockResponse:
        async with self.guard.call(context, "CreateBlock") as principal:
            block = await self.run.write(
                blocks.create_block, self.deps, principal, convert.block_from_pb(request.block)
            )
            return state_pb2.CreateBlockResponse(block=convert.block_to_pb(block))
        raise AssertionError("unreachable")

    async def GetBlock(
        self, request: state_pb2.GetBlockRequest, context: Ctx
    ) -> state_pb2.GetBlockResponse:
        async with self.guard.call(context, "GetBlock") as principal:
            block = await self.run.read(blocks.get_block, self.deps, principal, request.block_id)
            return state_pb2.GetBlockResponse(block=convert.block_to_pb(block))
        raise AssertionError("unreachable")

    async def ListBlocks(
        self, request: state_pb2.ListBlocksRequest, context: Ctx
    ) -> state_pb2.ListBlocksResponse:
        async with self.guard.call(context, "ListBlocks") as principal:
            found, token = await self.run.read(
                blocks.list_blocks,
                self.deps,
                principal,
                page_size=request.page_size,
                page_token=request.page_token,
                label=request.label,
                tags=list(request.tags),
                match_all_tags=request.match_all_tags,
            )
            return state_pb2.ListBlocksResponse(
                blocks=[convert.block_to_pb(b) for b in found], next_page_token=token
            )
        raise AssertionError("unreachable")

    async def UpdateBlock(
        self, request: state_pb2.UpdateBlockRequest, context: Ctx
    ) -> state_pb2.UpdateBlockResponse:
        async with self.guard.call(context, "UpdateBlock") as principal:
            paths = convert.mask_paths(list(request.update_mask.paths), BLOCK_UPDATABLE)
            result = await self.run.write(
                blocks.update_block,
                self.deps,
                principal,
                request.block.id,
                convert.block_changes(request.block, paths),
                _expected(request),
            )
            return convert.update_block_response(result)
        raise AssertionError("unreachable")

    async def DeleteBlock(
        self, request: state_pb2.DeleteBlockRequest, context: Ctx
    ) -> state_pb2.DeleteBlockResponse:
        async with self.guard.call(context, "DeleteBlock") as principal:
            detached = await self.run.write(
                blocks.delete_block,
                self.deps,
                principal,
                request.block_id,
                request.force,
                _expected(request),
            )
            return state_pb2.DeleteBlockResponse(detached_agent_ids=detached)
        raise AssertionError("unreachable")

    async def AttachBlock(
        self, request: state_pb2.AttachBlockRequest, context: Ctx
    ) -> state_pb2.AttachBlockResponse:
        async with self.guard.call(context, "AttachBlock") as principal:
            position = request.position if request.HasField("position") else None
            agent = await self.run.write(
                agents.attach_block,
                self.deps,
                principal,
                request.agent_id,
                request.block_id,
                position,
                _expected(request),
            )
            return state_pb2.AttachBlockResponse(agent=convert.agent_to_pb(agent))
        raise AssertionError("unreachable")

    async def DetachBlock(
        self, request: state_pb2.DetachBlockRequest, context: Ctx
    ) -> state_pb2.DetachBlockResponse:
        async with self.guard.call(context, "DetachBlock") as principal:
            agent = await self.run.write(
                agents.detach_block,
                self.deps,
                principal,
                request.agent_id,
                request.block_id,
                _expected(request),
            )
            return state_pb2.DetachBlockResponse(agent=convert.agent_to_pb(agent))
        raise AssertionError("unreachable")

    async def ReorderBlocks(
        self, request: state_pb2.ReorderBlocksRequest, context: Ctx
    ) -> state_pb2.ReorderBlocksResponse:
        async with self.guard.call(context, "ReorderBlocks") as principal:
            agent = await self.run.write(
                agents.reorder_blocks,
                self.deps,
                principal,
                request.agent_id,
                list(request.block_ids),
                _expected(request),
            )
            return state_pb2.ReorderBlocksResponse(agent=convert.agent_to_pb(agent))
        raise AssertionError("unreachable")

    async def CompileContext(
        self, request: state_pb2.CompileContextRequest, context: Ctx
    ) -> state_pb2.CompileContextResponse:
        async with self.guard.call(context, "CompileContext") as principal:
            args = (self.deps, principal, request.agent_id, self.context_settings)
            result = None
            if not request.force_recompile:
                result = await self.run.read(cached_context, *args)
            if result is None:
                result = await self.run.write(recompile_context, *args)
            return self._compile_response(result, request.view)
        raise AssertionError("unreachable")

    async def WatchAgent(
        self, request: state_pb2.WatchAgentRequest, context: Ctx
    ) -> AsyncIterator[state_pb2.WatchAgentResponse]:
        async with self.guard.call(context, "WatchAgent") as principal:
            with self.hub.subscribe(principal.tenant, request.agent_id) as sub:
                agent = await self.run.read(
                    agents.get_agent, self.deps, principal, request.agent_id
                )
                yield convert.started_event(agent, self.deps.clock())
                while True:
                    if sub.overflowed:
                        raise ResourceExhausted(
                            "this watch fell too far behind and was closed; watch again and "
                            "re-read the agent"
                        )
                    event = await sub.queue.get()
                    if event.kind is EventKind.AGENT_DELETED:
                        raise NotFound(f"agent '{request.agent_id}' was deleted")
                    yield convert.event_to_pb(event)

    async def CommitStep(
        self, request: state_pb2.CommitStepRequest, context: Ctx
    ) -> state_pb2.CommitStepResponse:
        async with self.guard.call(context, "CommitStep") as principal:
            messages = [
                convert.message_from_pb(f"messages[{i}]", m) for i, m in enumerate(request.messages)
            ]
            result = await self.run.write(
                steps.commit_step,
                self.deps,
                principal,
                request.agent_id,
                request.step_id,
                request.base_context_version,
                messages,
                request.acknowledged_memory_revision,
            )
            if self.forwarder is not None and not result.replayed:
                self.forwarder.wake()
            return state_pb2.CommitStepResponse(
                messages=[convert.message_to_pb(m) for m in result.messages],
                context_version=result.context_version,
                replayed=result.replayed,
            )
        raise AssertionError("unreachable")

    async def ListMessages(
        self, request: state_pb2.ListMessagesRequest, context: Ctx
    ) -> state_pb2.ListMessagesResponse:
        async with self.guard.call(context, "ListMessages") as principal:
            start, end = convert.time_bounds(request.time_range)
            found, token = await self.run.read(
                steps.list_messages,
                self.deps,
                principal,
                request.agent_id,
                page_size=request.page_size,
                page_token=request.page_token,
                roles=[convert.role_from_pb(f"roles[{i}]", r) for i, r in enumerate(request.roles)],
                start=start,
                end=end,
                newest_first=request.newest_first,
            )
            return state_pb2.ListMessagesResponse(
                messages=[convert.message_to_pb(m) for m in found], next_page_token=token
            )
        raise AssertionError("unreachable")

    async def ExecuteMemoryTool(
        self, request: state_pb2.ExecuteMemoryToolRequest, context: Ctx
    ) -> state_pb2.ExecuteMemoryToolResponse:
        async with self.guard.call(context, "ExecuteMemoryTool") as principal:
            outcome = await self.run.write(
                execute_memory_tool,
                self.deps,
                principal,
                request.agent_id,
                request.tool_name,
                request.arguments_json,
            )
            if isinstance(outcome, NeedsRecall):
                outcome = await run_recall_tool(
                    self.deps,
                    self.run,
                    self.recall,
                    principal,
                    request.agent_id,
                    outcome.call,
                    outcome.memory_revision,
                )
            return convert.tool_result_to_pb(outcome)
        raise AssertionError("unreachable")

    async def PlanCompaction(
        self, request: state_pb2.PlanCompactionRequest, context: Ctx
    ) -> state_pb2.PlanCompactionResponse:
        async with self.guard.call(context, "PlanCompaction") as principal:
            share = request.target_share if request.HasField("target_share") else None
            plan = await self.run.write(
                compaction.plan_compaction,
                self.deps,
                principal,
                request.agent_id,
                share,
                self.context_settings,
            )
            return state_pb2.PlanCompactionResponse(
                plan_id=plan.plan.plan_id,
                messages=[convert.message_to_pb(m) for m in plan.messages],
                base_context_version=plan.plan.base_context_version,
                tokens_before=plan.tokens_before,
                tokens_after=plan.tokens_after,
            )
        raise AssertionError("unreachable")

    async def ApplyCompaction(
        self, request: state_pb2.ApplyCompactionRequest, context: Ctx
    ) -> state_pb2.ApplyCompactionResponse:
        async with self.guard.call(context, "ApplyCompaction") as principal:
            applied = await self.run.write(
                compaction.apply_compaction,
                self.deps,
                principal,
                request.agent_id,
                request.plan_id,
                request.summary,
                self.context_settings,
            )
            return state_pb2.ApplyCompactionResponse(
                summary_message=convert.message_to_pb(applied.summary),
                context_version=applied.context_version,
                tokens=convert.tokens_to_pb(applied.tokens),
            )
        raise AssertionError("unreachable")

    async def ExportAgent(
        self, request: state_pb2.ExportAgentRequest, context: Ctx
    ) -> state_pb2.ExportAgentResponse:
        async with self.guard.call(context, "ExportAgent") as principal:
            text = await self.run.read(
                portability.export_agents, self.deps, principal, list(request.agent_ids)
            )
            return state_pb2.ExportAgentResponse(agent_file_json=text)
        raise AssertionError("unreachable")

    async def ImportAgent(
        self, request: state_pb2.ImportAgentRequest, context: Ctx
    ) -> state_pb2.ImportAgentResponse:
        async with self.guard.call(context, "ImportAgent") as principal:
            imported, ids = await self.run.write(
                portability.import_agents, self.deps, principal, request.agent_file_json
            )
            return state_pb2.ImportAgentResponse(
                agents=[convert.agent_to_pb(a) for a in imported], id_map=ids
            )
        raise AssertionError("unreachable")

    async def CommitMemoryFiles(
        self, request: state_pb2.CommitMemoryFilesRequest, context: Ctx
    ) -> state_pb2.CommitMemoryFilesResponse:
        async with self.guard.call(context, "CommitMemoryFiles") as principal:
            result = await self.run.write(
                memfs.commit_files,
                self.deps,
                principal,
                request.agent_id,
                [(u.path, u.content) for u in request.upserts],
                list(request.deletes),
                request.message,
                request.author,
                request.expected_revision,
            )
            return state_pb2.CommitMemoryFilesResponse(
                revision=result.revision,
                changed_paths=result.changed_paths,
                prompt_rebuilt=result.prompt_rebuilt,
            )
        raise AssertionError("unreachable")

    async def ListMemoryFiles(
        self, request: state_pb2.ListMemoryFilesRequest, context: Ctx
    ) -> state_pb2.ListMemoryFilesResponse:
        async with self.guard.call(context, "ListMemoryFiles") as principal:
            revision, files = await self.run.read(
                memfs.list_files, self.deps, principal, request.agent_id, request.revision
            )
            return state_pb2.ListMemoryFilesResponse(
                revision=revision, files=[convert.memory_file_to_pb(f) for f in files]
            )
        raise AssertionError("unreachable")

    async def GetMemoryFile(
        self, request: state_pb2.GetMemoryFileRequest, context: Ctx
    ) -> state_pb2.GetMemoryFileResponse:
        async with self.guard.call(context, "GetMemoryFile") as principal:
            revision, file = await self.run.read(
                memfs.get_file,
                self.deps,
                principal,
                request.agent_id,
                request.path,
                request.revision,
            )
            return state_pb2.GetMemoryFileResponse(
                revision=revision, file=convert.memory_file_to_pb(file)
            )
        raise AssertionError("unreachable")

    async def MemoryHistory(
        self, request: state_pb2.MemoryHistoryRequest, context: Ctx
    ) -> state_pb2.MemoryHistoryResponse:
        async with self.guard.call(context, "MemoryHistory") as principal:
            commits, token = await self.run.read(
                memfs.history,
                self.deps,
                principal,
                request.agent_id,
                request.path,
                request.page_size,
                request.page_token,
            )
            return state_pb2.MemoryHistoryResponse(
                commits=[convert.memory_commit_to_pb(c) for c in commits], next_page_token=token
            )
        raise AssertionError("unreachable")

    async def RevertMemory(
        self, request: state_pb2.RevertMemoryRequest, context: Ctx
    ) -> state_pb2.RevertMemoryResponse:
        async with self.guard.call(context, "RevertMemory") as principal:
            result = await self.run.write(
                memfs.revert,
                self.deps,
                principal,
                request.agent_id,
                request.revision,
                request.expected_revision,
                request.message,
                request.author,
            )
            return state_pb2.RevertMemoryResponse(
                revision=result.revision, changed_paths=result.changed_paths
            )
        raise AssertionError("unreachable")
