"""`cairn.Client`: the synchronous client of a Cairn deployment.

    with cairn.Client("127.0.0.1:50051", "127.0.0.1:50052", api_key=key) as client:
        agent = client.state.create_agent("helper", blocks=[cairn.BlockSpec("human", "Sam")])
        context = client.state.compile_context(agent.id)
        written = client.recall.write(stream_id, "hello", idempotency_key="turn-1")

`client.state` has one method per StateService RPC and `client.recall` one per RecallService
RPC, named after it in snake case. Lists are iterators that fetch pages as you go.
"""

from __future__ import annotations

from types import TracebackType

import grpc

from cairn import (
    agent_calls,
    block_calls,
    memfs_calls,
    proof_calls,
    recall_calls,
    step_calls,
)
from cairn.calls import Service
from cairn.channels import TLS, open_channel
from cairn.retries import RetryPolicy
from cairn.sync_transport import SyncTransport, paged, streaming, unary

__all__ = ["DEFAULT_TIMEOUT", "Client", "RecallClient", "StateClient"]

# Seconds a call may take, retries included, unless the client or the call says otherwise.
DEFAULT_TIMEOUT = 30.0


class StateClient:
    """The state service: agents, blocks, compiled contexts, steps, memory tools, compaction,
    agent files and MemFS. Each method's docstring says what it returns and raises."""

    def __init__(self, transport: SyncTransport) -> None:
        self._transport = transport

    create_agent = unary(agent_calls.create_agent)
    get_agent = unary(agent_calls.get_agent)
    list_agents = paged(agent_calls.list_agents)
    update_agent = unary(agent_calls.update_agent)
    delete_agent = unary(agent_calls.delete_agent)
    create_block = unary(block_calls.create_block)
    get_block = unary(block_calls.get_block)
    list_blocks = paged(block_calls.list_blocks)
    update_block = unary(block_calls.update_block)
    delete_block = unary(block_calls.delete_block)
    attach_block = unary(block_calls.attach_block)
    detach_block = unary(block_calls.detach_block)
    reorder_blocks = unary(block_calls.reorder_blocks)
    compile_context = unary(step_calls.compile_context)
    watch_agent = streaming(step_calls.watch_agent)
    commit_step = unary(step_calls.commit_step)
    list_messages = paged(step_calls.list_messages)
    execute_memory_tool = unary(step_calls.execute_memory_tool)
    plan_compaction = unary(step_calls.plan_compaction)
    apply_compaction = unary(step_calls.apply_compaction)
    export_agent = unary(agent_calls.export_agent)
    import_agent = unary(agent_calls.import_agent)
    commit_memory_files = unary(memfs_calls.commit_memory_files)
    list_memory_files = unary(memfs_calls.list_memory_files)
    get_memory_file = unary(memfs_calls.get_memory_file)
    memory_history = paged(memfs_calls.memory_history)
    revert_memory = unary(memfs_calls.revert_memory)


class RecallClient:
    """The recall service: streams, participants, records, checkpoints and proofs. Each
    method's docstring says what it returns and raises."""

    def __init__(self, transport: SyncTransport) -> None:
        self._transport = transport

    create_stream = unary(recall_calls.create_stream)
    get_stream = unary(recall_calls.get_stream)
    list_streams = paged(recall_calls.list_streams)
    attach = unary(recall_calls.attach)
    detach = unary(recall_calls.detach)
    list_participants = paged(recall_calls.list_participants)
    write = unary(recall_calls.write)
    write_batch = unary(recall_calls.write_batch)
    read = paged(recall_calls.read)
    overlapping_writes = paged(recall_calls.overlapping_writes)
    redact = unary(recall_calls.redact)
    search = unary(recall_calls.search)
    verify_stream = unary(proof_calls.verify_stream)
    get_checkpoint = unary(proof_calls.get_checkpoint)
    get_inclusion_proof = unary(proof_calls.get_inclusion_proof)
    get_consistency_proof = unary(proof_calls.get_consistency_proof)
    get_public_key = unary(proof_calls.get_public_key)


class Client:
    """One Cairn deployment: the state service at `state` and the recall service at `recall`
    (`host:port`; either may be left out), called with `api_key`.

    Channels use TLS with the system's roots, or as `tls` says, except on loopback addresses
    or with `plaintext=True`. Every call has a deadline of `timeout` seconds (None: no
    deadline) unless it passes its own `timeout`; idempotent calls are retried per `retry`
    when the server is unavailable. Close the client, or use it as a context manager."""

    def __init__(
        self,
        state: str | None = None,
        recall: str | None = None,
        *,
        api_key: str | None = None,
        tls: TLS | None = None,
        plaintext: bool = False,
        timeout: float | None = DEFAULT_TIMEOUT,
        retry: RetryPolicy | None = None,
    ) -> None:
        if state is None and recall is None:
            raise ValueError("give the address of the state service, the recall service, or both")
        addresses: dict[Service, str | None] = {"state": state, "recall": recall}
        channels = {
            service: open_channel(address, tls=tls, plaintext=plaintext)
            for service, address in addresses.items()
            if address is not None
        }
        self._setup(channels, api_key, timeout, retry, owned=list(channels.values()))

    @classmethod
    def from_channels(
        cls,
        *,
        state: grpc.Channel | None = None,
        recall: grpc.Channel | None = None,
        api_key: str | None = None,
        timeout: float | None = DEFAULT_TIMEOUT,
        retry: RetryPolicy | None = None,
    ) -> Client:
        """A client over channels you opened (and close yourself)."""
        client = cls.__new__(cls)
        channels: dict[Service, grpc.Channel] = {}
        if state is not None:
            channels["state"] = state
        if recall is not None:
            channels["recall"] = recall
        client._setup(channels, api_key, timeout, retry, owned=[])
        return client

    def _setup(
        self,
        channels: dict[Service, grpc.Channel],
        api_key: str | None,
        timeout: float | None,
        retry: RetryPolicy | None,
        owned: list[grpc.Channel],
    ) -> None:
        self._transport = SyncTransport(
            channels, api_key=api_key, timeout=timeout, retry=retry or RetryPolicy()
        )
        self._owned = owned
        self.state = StateClient(self._transport)
        self.recall = RecallClient(self._transport)

    def close(self) -> None:
        """Closes the channels this client opened."""
        for channel in self._owned:
            channel.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()
