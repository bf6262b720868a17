"""The service's Ed25519 checkpoint key: created on first start, kept in the data directory.

The key file holds the raw 32-byte private key, PEM-encoded (PKCS#8), mode 0600. It is
created with O_EXCL under a temporary name and then linked into place, so two processes
starting together on one data directory end up with the same key, never half a file.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)

from recall_service.canonical import checkpoint_bytes
from recall_service.models import Checkpoint

KEY_FILE = "recall-signing-key.pem"
ALGORITHM = "Ed25519"


def key_id(public_key: bytes) -> str:
    """First 16 hex digits of SHA-256(raw public key)."""
    return hashlib.sha256(public_key).hexdigest()[:16]


class Signer:
    """Signs and verifies checkpoints with one Ed25519 key."""

    def __init__(self, private_key: Ed25519PrivateKey) -> None:
        self._private = private_key
        self._public = private_key.public_key()
        self.public_key = self._public.public_bytes(
            serialization.Encoding.Raw, serialization.PublicFormat.Raw
        )
        self.key_id = key_id(self.public_key)

    def checkpoint(
        self, tenant: str, stream_id: str, size: int, root: bytes, head: bytes, time: int
    ) -> Checkpoint:
        """A signed checkpoint of the given state."""
        message = checkpoint_bytes(tenant, stream_id, size, root, head, time)
        return Checkpoint(
            tenant, stream_id, size, root, head, time, self.key_id, self._private.sign(message)
        )

    def verify(self, checkpoint: Checkpoint) -> bool:
        """True when the checkpoint's signature is this key's signature of its fields."""
        try:
            message = checkpoint_bytes(
                checkpoint.tenant,
                checkpoint.stream_id,
                checkpoint.size,
                checkpoint.root,
                checkpoint.head,
                checkpoint.time,
            )
            self._public.verify(checkpoint.signature, message)
        except (InvalidSignature, ValueError):
            return False
        return True


def load_or_create(data_dir: Path) -> Signer:
    """The data directory's signing key, created (mode 0600) when there is none."""
    data_dir.mkdir(parents=True, exist_ok=True)
    path = data_dir / KEY_FILE
    if not path.exists():
        key = Ed25519PrivateKey.generate()
        pem = key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        temp = data_dir / f".{KEY_FILE}.{os.getpid()}.tmp"
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.write(fd, pem)
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.link(temp, path)  # fails if another process won the race: use its key
        except FileExistsError:
            pass
        finally:
            temp.unlink()
    loaded = serialization.load_pem_private_key(path.read_bytes(), password=None)
    if not isinstance(loaded, Ed25519PrivateKey):
        raise ValueError(f"{path} does not hold an Ed25519 private key")
    return Signer(loaded)


def public_key_from_raw(raw: bytes) -> Ed25519PublicKey:
    """An Ed25519 public key from its 32 raw bytes."""
    return Ed25519PublicKey.from_public_bytes(raw)
