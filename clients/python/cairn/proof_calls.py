"""The recall service's methods for checking a stream: server-side verification, signed
checkpoints, Merkle proofs and the signing key.

Each function builds the call for the client method of the same name (`client.recall.<name>`)
and its docstring documents that method; `timeout` as in `agent_calls`. All of them are reads,
retried when the server is unavailable. Check what they return on your side with
`cairn.verify`.
"""

from __future__ import annotations

from cairn import recall_convert as convert
from cairn.calls import Call
from cairn.recall_types import Checkpoint, ConsistencyProof, InclusionProof, PublicKey, Verification
from cairn.v1 import recall_pb2


def verify_stream(
    stream_id: str,
    *,
    trusted_checkpoint: Checkpoint | None = None,
    timeout: float | None = None,
) -> Call[Verification]:
    """Has the server recompute every hash of the stream and check its stored checkpoints
    (and `trusted_checkpoint`, one you kept). A failed verification is an answer
    (`ok` False), not an error. Raises InvalidArgument when `trusted_checkpoint` is for
    another stream or not signed by the server's key."""
    return Call(
        "recall",
        "VerifyStream",
        recall_pb2.VerifyStreamRequest(
            stream_id=stream_id,
            trusted_checkpoint=trusted_checkpoint.to_proto() if trusted_checkpoint else None,
        ),
        convert.verification,
        idempotent=True,
        timeout=timeout,
    )


def get_checkpoint(stream_id: str, *, timeout: float | None = None) -> Call[Checkpoint]:
    """Returns the stream's latest signed checkpoint."""
    return Call(
        "recall",
        "GetCheckpoint",
        recall_pb2.GetCheckpointRequest(stream_id=stream_id),
        lambda r: convert.checkpoint(r.checkpoint),
        idempotent=True,
        timeout=timeout,
    )


def get_inclusion_proof(
    stream_id: str, seq: int, *, tree_size: int = 0, timeout: float | None = None
) -> Call[InclusionProof]:
    """Returns an RFC 6962 inclusion proof of record `seq` in the tree of `tree_size` leaves
    (0: the current size, and then the latest checkpoint comes with it). Raises
    InvalidArgument (seq < 1, seq > tree_size, tree_size beyond the stream)."""
    return Call(
        "recall",
        "GetInclusionProof",
        recall_pb2.GetInclusionProofRequest(stream_id=stream_id, seq=seq, tree_size=tree_size),
        convert.inclusion_proof,
        idempotent=True,
        timeout=timeout,
    )


def get_consistency_proof(
    stream_id: str, from_size: int, *, to_size: int = 0, timeout: float | None = None
) -> Call[ConsistencyProof]:
    """Returns an RFC 6962 consistency proof between two tree sizes (`to_size` 0: the
    current size). Raises InvalidArgument (from_size > to_size, to_size beyond the stream)."""
    return Call(
        "recall",
        "GetConsistencyProof",
        recall_pb2.GetConsistencyProofRequest(
            stream_id=stream_id, from_size=from_size, to_size=to_size
        ),
        convert.consistency_proof,
        idempotent=True,
        timeout=timeout,
    )


def get_public_key(*, timeout: float | None = None) -> Call[PublicKey]:
    """Returns the Ed25519 public key that signs checkpoints. Pin it."""
    return Call(
        "recall",
        "GetPublicKey",
        recall_pb2.GetPublicKeyRequest(),
        convert.public_key,
        idempotent=True,
        timeout=timeout,
    )
