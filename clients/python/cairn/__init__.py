"""Cairn's Python client.

`Client` (synchronous) and `AsyncClient` (asyncio) reach one deployment: the state service and
the recall service, either optional. `client.state` and `client.recall` have one method per
RPC of the contract (`protos/cairn/v1/`), named after it in snake case, taking plain Python
values and returning frozen dataclasses; lists are iterators that follow page tokens.

    import cairn

    with cairn.Client("127.0.0.1:50051", "127.0.0.1:50052", api_key=key) as client:
        human = client.state.create_block("human", "Name: Sam")
        agent = client.state.create_agent("helper", system="You help.", block_ids=[human.id])
        context = client.state.compile_context(agent.id)
        client.state.commit_step(
            agent.id,
            [cairn.Message.user("Hi"), cairn.Message.assistant("Hello, Sam.")],
            base_context_version=context.context_version,
        )

        created = client.recall.create_stream(cairn.StreamKind.CONVERSATION,
                                               owner_agent_id="planner")
        written = client.recall.write(created.stream.id, "Ship on Friday.",
                                      source_agent_id="planner", idempotency_key="msg-1")
        for record in client.recall.read(created.stream.id):
            print(record.seq, record.source_agent_id, record.content)

Connections use TLS (system roots, or `TLS(...)` for your own CA and a client certificate)
except to loopback addresses or with `plaintext=True`. Every call has a deadline (30 s by
default, `timeout=` on the client or on any call). Reads, `commit_step` and recall writes
with an idempotency key are retried with exponential backoff and jitter when the server is
unavailable (`RetryPolicy`); nothing else is sent twice. A failed call raises a subclass of
`cairn.errors.CairnError` carrying the gRPC `code` and the server's `details`; an
`InvalidArgument` also carries the `field_violations`.

`cairn.verify` checks what the recall service returns without trusting it (pass
`record.to_proto()` and `checkpoint.to_proto()`); `cairn.v1` holds the generated stubs.
"""

from cairn.async_client import AsyncClient
from cairn.channels import TLS
from cairn.client import Client
from cairn.enums import (
    ContextStatus,
    ContextView,
    EventType,
    MemoryMode,
    MemoryToolError,
    MemoryUpdateMode,
    MessageRole,
    ParticipantRole,
    RecordKind,
    StreamKind,
    ToolRuleType,
)
from cairn.errors import (
    Aborted,
    AlreadyExists,
    CairnError,
    Cancelled,
    DeadlineExceeded,
    FailedPrecondition,
    FieldViolation,
    Internal,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    ResourceExhausted,
    Unauthenticated,
    Unavailable,
    Unimplemented,
)
from cairn.recall_types import (
    Appended,
    Attached,
    Checkpoint,
    ConsistencyProof,
    CreatedStream,
    InclusionProof,
    OverlappingPair,
    Participant,
    PublicKey,
    Record,
    RecordRef,
    SearchHit,
    SearchResults,
    Stream,
    Verification,
    WriteEntry,
    Written,
    WrittenBatch,
)
from cairn.retries import RetryPolicy
from cairn.state_types import (
    Agent,
    AgentEvent,
    AgentUpdate,
    AppliedCompaction,
    Block,
    BlockSpec,
    BlockUpdate,
    CommittedFiles,
    CommittedStep,
    CompactionPlan,
    CompiledContext,
    ImportedAgents,
    MemoryCommit,
    MemoryFile,
    MemoryToolResult,
    Message,
    RevertedMemory,
    TokenAccount,
    Tool,
    ToolCall,
    ToolRule,
)

__all__ = [
    "TLS",
    "Aborted",
    "Agent",
    "AgentEvent",
    "AgentUpdate",
    "AlreadyExists",
    "Appended",
    "AppliedCompaction",
    "AsyncClient",
    "Attached",
    "Block",
    "BlockSpec",
    "BlockUpdate",
    "CairnError",
    "Cancelled",
    "Checkpoint",
    "Client",
    "CommittedFiles",
    "CommittedStep",
    "CompactionPlan",
    "CompiledContext",
    "ConsistencyProof",
    "ContextStatus",
    "ContextView",
    "CreatedStream",
    "DeadlineExceeded",
    "EventType",
    "FailedPrecondition",
    "FieldViolation",
    "ImportedAgents",
    "InclusionProof",
    "Internal",
    "InvalidArgument",
    "MemoryCommit",
    "MemoryFile",
    "MemoryMode",
    "MemoryToolError",
    "MemoryToolResult",
    "MemoryUpdateMode",
    "Message",
    "MessageRole",
    "NotFound",
    "OverlappingPair",
    "Participant",
    "ParticipantRole",
    "PermissionDenied",
    "PublicKey",
    "Record",
    "RecordKind",
    "RecordRef",
    "ResourceExhausted",
    "RetryPolicy",
    "RevertedMemory",
    "SearchHit",
    "SearchResults",
    "Stream",
    "StreamKind",
    "TokenAccount",
    "Tool",
    "ToolCall",
    "ToolRule",
    "ToolRuleType",
    "Unauthenticated",
    "Unavailable",
    "Unimplemented",
    "Verification",
    "WriteEntry",
    "Written",
    "WrittenBatch",
]
