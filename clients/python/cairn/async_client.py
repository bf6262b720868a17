"""`cairn.AsyncClient`: the asyncio client of a Cairn deployment, method for method the same
as `cairn.Client` (the methods are built from the same builders).

    async with cairn.AsyncClient("127.0.0.1:50051", "127.0.0.1:50052", api_key=key) as client:
        agent = await client.state.get_agent(agent_id)
        async for record in client.recall.read(stream_id):
            ...
"""

from __future__ import annotations

from types import TracebackType

from grpc import aio

from cairn import (
    agent_calls,
    block_calls,
    memfs_calls,
    proof_calls,
    recall_calls,
    step_calls,
)
from cairn.async_transport import AsyncTransport, paged, streaming, unary
from cairn.calls import Service
from cairn.channels import TLS, open_async_channel
from cairn.client import DEFAULT_TIMEOUT
from cairn.retries import RetryPolicy

__all__ = ["AsyncClient", "AsyncRecallClient", "AsyncStateClient"]


class AsyncStateClient:
    """The state service, as `cairn.client.StateClient`, with coroutine methods and async
    iterators."""

    def __init__(self, transport: AsyncTransport) -> None:
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


class AsyncRecallClient:
    """The recall service, as `cairn.client.RecallClient`, with coroutine methods and async
    iterators."""

    def __init__(self, transport: AsyncTransport) -> None:
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


class AsyncClient:
    """One Cairn deployment over asyncio channels; the options are those of `cairn.Client`.
    Create it inside the event loop that uses it, and close it with `await client.close()`
    or `async with`."""

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
            service: open_async_channel(address, tls=tls, plaintext=plaintext)
            for service, address in addresses.items()
            if address is not None
        }
        self._setup(channels, api_key, timeout, retry, owned=list(channels.values()))

    @classmethod
    def from_channels(
        cls,
        *,
        state: aio.Channel | None = None,
        recall: aio.Channel | None = None,
        api_key: str | None = None,
        timeout: float | None = DEFAULT_TIMEOUT,
        retry: RetryPolicy | None = None,
    ) -> AsyncClient:
        """A client over asyncio channels you opened (and close yourself)."""
        client = cls.__new__(cls)
        channels: dict[Service, aio.Channel] = {}
        if state is not None:
            channels["state"] = state
        if recall is not None:
            channels["recall"] = recall
        client._setup(channels, api_key, timeout, retry, owned=[])
        return client

    def _setup(
        self,
        channels: dict[Service, aio.Channel],
        api_key: str | None,
        timeout: float | None,
        retry: RetryPolicy | None,
        owned: list[aio.Channel],
    ) -> None:
        self._transport = AsyncTransport(
            channels, api_key=api_key, timeout=timeout, retry=retry or RetryPolicy()
        )
        self._owned = owned
        self.state = AsyncStateClient(self._transport)
        self.recall = AsyncRecallClient(self._transport)

    async def close(self) -> None:
        """Closes the channels this client opened."""
        for channel in self._owned:
            await channel.close()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.close()
