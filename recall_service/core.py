"""What every recall operation needs: the store, the signing key, a clock, salts, limits."""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from cairn_server.errors import NotFound
from recall_service.canonical import SALT_BYTES
from recall_service.models import Stream
from recall_service.projections.embedders import ClientVectors
from recall_service.signing import Signer
from recall_service.store.base import LogReader, LogStore
from recall_service.validation import DEFAULT_MAX_CONTENT_BYTES


def now_us() -> int:
    """Wall-clock time in integer microseconds since the epoch."""
    return time.time_ns() // 1000


@dataclass
class Deps:
    """The store, the checkpoint signer, and the sources of time, salt and ids.

    `client_vectors` is set when the server's vectors come from clients (`--embedder
    client`): writes may then carry a vector, checked against it; otherwise they may not.
    """

    store: LogStore
    signer: Signer
    max_content_bytes: int = DEFAULT_MAX_CONTENT_BYTES
    client_vectors: ClientVectors | None = None
    clock: Callable[[], int] = now_us
    salt: Callable[[], bytes] = field(default=lambda: os.urandom(SALT_BYTES))

    def new_stream_id(self) -> str:
        """A fresh server-assigned stream id."""
        return f"stream-{uuid.uuid4()}"


def stream_not_found(stream_id: str) -> NotFound:
    """The one NOT_FOUND message for streams (the same for another tenant's id)."""
    return NotFound(f"stream '{stream_id}' not found")


def load_stream(reader: LogReader, tenant: str, stream_id: str) -> Stream:
    """The tenant's stream or NotFound."""
    stream = reader.get_stream(tenant, stream_id) if stream_id else None
    if stream is None:
        raise stream_not_found(stream_id)
    return stream
