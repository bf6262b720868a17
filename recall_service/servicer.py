"""The RecallService servicer: protobuf in, domain call, protobuf out. Nothing else."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc

from cairn.v1 import recall_pb2, recall_pb2_grpc
from cairn_server.errors import Unavailable
from cairn_server.rpc import RpcGuard
from cairn_server.runner import Runner
from recall_service import convert, participants, proofs, reads, redaction, streams, writes
from recall_service.core import Deps
from recall_service.search import Searcher
from recall_service.signing import ALGORITHM
from recall_service.verification import verify_stream

Ctx = grpc.aio.ServicerContext[Any, Any]


class RecallServicer(recall_pb2_grpc.RecallServiceServicer):
    """Maps each RPC onto the domain functions of the recall service."""

    def __init__(
        self, deps: Deps, guard: RpcGuard, runner: Runner, search: Searcher | None = None
    ) -> None:
        self.deps = deps
        self.guard = guard
        self.run = runner
        self.search = search

    async def CreateStream(
        self, request: recall_pb2.CreateStreamRequest, context: Ctx
    ) -> recall_pb2.CreateStreamResponse:
        async with self.guard.call(context, "CreateStream") as principal:
            kind = convert.stream_kind("kind", request.kind)
            stream, attach, checkpoint = await self.run.write(
                streams.create_stream,
                self.deps,
                principal,
                request.stream_id,
                kind,
                request.owner_agent_id,
            )
            return recall_pb2.CreateStreamResponse(
                stream=convert.stream_to_pb(stream),
                owner_attach=convert.record_to_pb(attach) if attach else None,
                checkpoint=convert.checkpoint_to_pb(checkpoint),
            )
        raise AssertionError("unreachable")

    async def GetStream(
        self, request: recall_pb2.GetStreamRequest, context: Ctx
    ) -> recall_pb2.GetStreamResponse:
        async with self.guard.call(context, "GetStream") as principal:
            stream = await self.run.read(
                streams.get_stream, self.deps, principal, request.stream_id
            )
            return recall_pb2.GetStreamResponse(stream=convert.stream_to_pb(stream))
        raise AssertionError("unreachable")

    async def ListStreams(
        self, request: recall_pb2.ListStreamsRequest, context: Ctx
    ) -> recall_pb2.ListStreamsResponse:
        async with self.guard.call(context, "ListStreams") as principal:
            found, token = await self.run.read(
                streams.list_streams,
                self.deps,
                principal,
                page_size=request.page_size,
                page_token=request.page_token,
                kind=convert.optional_kind(request.kind),
            )
            return recall_pb2.ListStreamsResponse(
                streams=[convert.stream_to_pb(s) for s in found], next_page_token=token
            )
        raise AssertionError("unreachable")

    async def Attach(
        self, request: recall_pb2.AttachRequest, context: Ctx
    ) -> recall_pb2.AttachResponse:
        async with self.guard.call(context, "Attach") as principal:
            role = convert.role("role", request.role)
            participant, record, checkpoint = await self.run.write(
                participants.attach,
                self.deps,
                principal,
                request.stream_id,
                request.agent_id,
                role,
            )
            return recall_pb2.AttachResponse(
                participant=convert.participant_to_pb(participant),
                record=convert.record_to_pb(record) if record else None,
                checkpoint=convert.checkpoint_to_pb(checkpoint) if checkpoint else None,
            )
        raise AssertionError("unreachable")

    async def Detach(
        self, request: recall_pb2.DetachRequest, context: Ctx
    ) -> recall_pb2.DetachResponse:
        async with self.guard.call(context, "Detach") as principal:
            record, checkpoint = await self.run.write(
                participants.detach, self.deps, principal, request.stream_id, request.agent_id
            )
            return recall_pb2.DetachResponse(
                record=convert.record_to_pb(record),
                checkpoint=convert.checkpoint_to_pb(checkpoint),
            )
        raise AssertionError("unreachable")

    async def ListParticipants(
        self, request: recall_pb2.ListParticipantsRequest, context: Ctx
    ) -> recall_pb2.ListParticipantsResponse:
        async with self.guard.call(context, "ListParticipants") as principal:
            found, token = await self.run.read(
                participants.list_participants,
                self.deps,
                principal,
                request.stream_id,
                at_seq=request.at_seq,
                page_size=request.page_size,
                page_token=request.page_token,
            )
            return recall_pb2.ListParticipantsResponse(
                participants=[convert.participant_to_pb(p) for p in found],
                next_page_token=token,
            )
        raise AssertionError("unreachable")

    async def Write(
        self, request: recall_pb2.WriteRequest, context: Ctx
    ) -> recall_pb2.WriteResponse:
        async with self.guard.call(context, "Write") as principal:
            result = await self.run.write(
                writes.write,
                self.deps,
                principal,
                request.stream_id,
                [convert.entry_from_pb(request.entry)],
                batch=False,
            )
            return recall_pb2.WriteResponse(
                record=convert.record_to_pb(result.records[0]),
                checkpoint=convert.checkpoint_to_pb(result.checkpoint),
                replayed=result.replayed[0],
            )
        raise AssertionError("unreachable")

    async def WriteBatch(
        self, request: recall_pb2.WriteBatchRequest, context: Ctx
    ) -> recall_pb2.WriteBatchResponse:
        async with self.guard.call(context, "WriteBatch") as principal:
            result = await self.run.write(
                writes.write,
                self.deps,
                principal,
                request.stream_id,
                [convert.entry_from_pb(e) for e in request.entries],
                batch=True,
            )
            return recall_pb2.WriteBatchResponse(
                records=[convert.record_to_pb(r) for r in result.records],
                checkpoint=convert.checkpoint_to_pb(result.checkpoint),
            )
        raise AssertionError("unreachable")

    async def Read(self, request: recall_pb2.ReadRequest, context: Ctx) -> recall_pb2.ReadResponse:
        async with self.guard.call(context, "Read") as principal:
            found, token = await self.run.read(
                reads.read,
                self.deps,
                principal,
                request.stream_id,
                convert.query_from_pb(request),
                page_size=request.page_size,
                page_token=request.page_token,
            )
            return recall_pb2.ReadResponse(
                records=[convert.record_to_pb(r) for r in found], next_page_token=token
            )
        raise AssertionError("unreachable")

    async def OverlappingWrites(
        self, request: recall_pb2.OverlappingWritesRequest, context: Ctx
    ) -> recall_pb2.OverlappingWritesResponse:
        async with self.guard.call(context, "OverlappingWrites") as principal:
            pairs, token = await self.run.read(
                reads.overlapping_writes,
                self.deps,
                principal,
                request.stream_id,
                request.within_seconds,
                page_size=request.page_size,
                page_token=request.page_token,
            )
            return recall_pb2.OverlappingWritesResponse(
                pairs=[
                    recall_pb2.OverlappingPair(
                        earlier=convert.record_to_pb(a),
                        later=convert.record_to_pb(b),
                        seconds_apart=(b.created_at - a.created_at) / 1_000_000,
                    )
                    for a, b in pairs
                ],
                next_page_token=token,
            )
        raise AssertionError("unreachable")

    async def VerifyStream(
        self, request: recall_pb2.VerifyStreamRequest, context: Ctx
    ) -> recall_pb2.VerifyStreamResponse:
        async with self.guard.call(context, "VerifyStream") as principal:
            trusted = None
            if request.HasField("trusted_checkpoint"):
                trusted = convert.checkpoint_from_pb(
                    "trusted_checkpoint", request.trusted_checkpoint
                )
            # A whole-stream scan: off the event loop, on a thread with its own reader.
            verdict = await asyncio.to_thread(
                verify_stream, self.deps, principal, request.stream_id, trusted
            )
            return recall_pb2.VerifyStreamResponse(
                ok=verdict.ok,
                size=verdict.size,
                chain_head=verdict.head,
                root=verdict.root,
                first_bad_seq=verdict.first_bad_seq,
                reason=verdict.reason,
                checkpoints_checked=verdict.checkpoints_checked,
            )
        raise AssertionError("unreachable")

    async def GetCheckpoint(
        self, request: recall_pb2.GetCheckpointRequest, context: Ctx
    ) -> recall_pb2.GetCheckpointResponse:
        async with self.guard.call(context, "GetCheckpoint") as principal:
            checkpoint = await self.run.read(
                proofs.get_checkpoint, self.deps, principal, request.stream_id
            )
            return recall_pb2.GetCheckpointResponse(checkpoint=convert.checkpoint_to_pb(checkpoint))
        raise AssertionError("unreachable")

    async def GetInclusionProof(
        self, request: recall_pb2.GetInclusionProofRequest, context: Ctx
    ) -> recall_pb2.GetInclusionProofResponse:
        async with self.guard.call(context, "GetInclusionProof") as principal:
            proof = await self.run.read(
                proofs.inclusion_proof,
                self.deps,
                principal,
                request.stream_id,
                request.seq,
                request.tree_size,
            )
            return recall_pb2.GetInclusionProofResponse(
                leaf_index=proof.leaf_index,
                tree_size=proof.tree_size,
                leaf_hash=proof.leaf_hash,
                proof=proof.proof,
                root=proof.root,
                checkpoint=convert.checkpoint_to_pb(proof.checkpoint) if proof.checkpoint else None,
            )
        raise AssertionError("unreachable")

    async def GetConsistencyProof(
        self, request: recall_pb2.GetConsistencyProofRequest, context: Ctx
    ) -> recall_pb2.GetConsistencyProofResponse:
        async with self.guard.call(context, "GetConsistencyProof") as principal:
            proof = await self.run.read(
                proofs.consistency_proof,
                self.deps,
                principal,
                request.stream_id,
                request.from_size,
                request.to_size,
            )
            return recall_pb2.GetConsistencyProofResponse(
                from_size=proof.from_size,
                to_size=proof.to_size,
                proof=proof.proof,
                from_root=proof.from_root,
                to_root=proof.to_root,
            )
        raise AssertionError("unreachable")

    async def GetPublicKey(
        self, request: recall_pb2.GetPublicKeyRequest, context: Ctx
    ) -> recall_pb2.GetPublicKeyResponse:
        async with self.guard.call(context, "GetPublicKey"):
            return recall_pb2.GetPublicKeyResponse(
                algorithm=ALGORITHM,
                public_key=self.deps.signer.public_key,
                key_id=self.deps.signer.key_id,
            )
        raise AssertionError("unreachable")

    async def Redact(
        self, request: recall_pb2.RedactRequest, context: Ctx
    ) -> recall_pb2.RedactResponse:
        async with self.guard.call(context, "Redact") as principal:
            record, checkpoint = await self.run.write(
                redaction.redact,
                self.deps,
                principal,
                request.stream_id,
                request.seq,
                request.reason,
            )
            return recall_pb2.RedactResponse(
                record=convert.record_to_pb(record),
                checkpoint=convert.checkpoint_to_pb(checkpoint),
            )
        raise AssertionError("unreachable")

    async def Search(
        self, request: recall_pb2.SearchRequest, context: Ctx
    ) -> recall_pb2.SearchResponse:
        async with self.guard.call(context, "Search") as principal:
            if self.search is None:
                raise Unavailable("search is not enabled on this server")
            answer = await self.search.search(
                principal, convert.search_query_from_pb(request), context.time_remaining()
            )
            return recall_pb2.SearchResponse(
                hits=[convert.hit_to_pb(h) for h in answer.hits],
                vector_lane_skipped=answer.vector_lane_skipped,
            )
        raise AssertionError("unreachable")
