"""API keys and principals, shared by both services.

A key is `ck_<key id>_<secret>`. Only its SHA-256 is stored: keys carry 256 bits of
randomness, so a slow password hash would add latency to every call and no security.
"""

from __future__ import annotations

import hashlib
import secrets
import threading
import time
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

from cairn_server.errors import InvalidArgument, NotFound, Unauthenticated


class Role(StrEnum):
    """What a principal may do within its tenant."""

    ADMIN = "admin"
    AGENT = "agent"
    SERVICE = "service"


@dataclass(frozen=True, slots=True)
class Principal:
    """The authenticated caller: every resource it touches belongs to `tenant`."""

    tenant: str
    subject: str
    role: Role
    key_id: str = ""

    def describe(self) -> str:
        """A short, log-safe description (never the key)."""
        return f"{self.role.value} '{self.subject}' of tenant '{self.tenant}'"


@dataclass(frozen=True, slots=True)
class KeyRecord:
    """A stored API key: everything but the key itself."""

    key_id: str
    key_hash: str
    tenant: str
    subject: str
    role: Role
    created_at: float
    revoked_at: float | None = None


class KeyStore(Protocol):
    """Where key hashes live (SQLite file in the data directory, or PostgreSQL)."""

    def add_key(self, record: KeyRecord) -> None:
        """Stores a new key record."""

    def find_by_hash(self, key_hash: str) -> KeyRecord | None:
        """Returns the key with this hash, revoked or not."""

    def list_keys(self, tenant: str | None) -> list[KeyRecord]:
        """Lists keys, optionally of one tenant, oldest first."""

    def revoke(self, key_id: str, when: float) -> bool:
        """Marks the key revoked; False when no such (unrevoked) key exists."""


_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.:@")
KEY_PREFIX = "ck_"


def hash_key(key: str) -> str:
    """The stored form of a key."""
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def _check_name(field: str, value: str) -> None:
    if not value or len(value) > 128 or not set(value) <= _NAME_CHARS:
        raise InvalidArgument(field, f"must be 1-128 characters of [A-Za-z0-9_-.:@], got {value!r}")


def create_key(
    store: KeyStore, tenant: str, role: Role | str, subject: str | None = None
) -> tuple[str, KeyRecord]:
    """Creates a key; returns the key (shown once, never stored) and its record."""
    _check_name("tenant", tenant)
    try:
        role = Role(role)
    except ValueError:
        raise InvalidArgument(
            "role", f"must be one of {', '.join(r.value for r in Role)}, got {role!r}"
        ) from None
    key_id = secrets.token_hex(6)
    if subject is None or subject == "":
        subject = f"key-{key_id}"
    _check_name("subject", subject)
    key = f"{KEY_PREFIX}{key_id}_{secrets.token_urlsafe(32)}"
    record = KeyRecord(key_id, hash_key(key), tenant, subject, role, time.time())
    store.add_key(record)
    return key, record


def revoke_key(store: KeyStore, key_id: str) -> None:
    """Revokes a key by id; NotFound when there is no such active key."""
    if not store.revoke(key_id, time.time()):
        raise NotFound(f"no active API key with id '{key_id}'")


class Authenticator:
    """Turns `authorization` metadata into a principal.

    Valid keys are cached for `ttl` seconds, so a revocation takes effect within that time
    on every replica without a store read per call.
    """

    def __init__(self, store: KeyStore | None, *, insecure_local: bool = False, ttl: float = 5.0):
        self._store = store
        self._insecure = insecure_local
        self._ttl = ttl
        self._cache: dict[str, tuple[Principal, float]] = {}
        self._lock = threading.Lock()

    @property
    def insecure(self) -> bool:
        """True when every call runs as the local admin without a key."""
        return self._insecure

    def authenticate(self, authorization: str | None) -> Principal:
        """Returns the caller's principal or raises Unauthenticated."""
        if self._insecure:
            return LOCAL_PRINCIPAL
        if not authorization:
            raise Unauthenticated("missing 'authorization: Bearer <api key>' metadata")
        scheme, _, key = authorization.partition(" ")
        key = key.strip()
        if scheme.lower() != "bearer" or not key:
            raise Unauthenticated("authorization metadata must be 'Bearer <api key>'")
        if not key.startswith(KEY_PREFIX):
            raise Unauthenticated("malformed API key: Cairn keys start with 'ck_'")
        digest = hash_key(key)
        now = time.monotonic()
        cached = self._cache.get(digest)
        if cached is not None and cached[1] > now:
            return cached[0]
        record = self._store.find_by_hash(digest) if self._store is not None else None
        if record is None:
            raise Unauthenticated("unknown API key")
        if record.revoked_at is not None:
            raise Unauthenticated(f"API key '{record.key_id}' has been revoked")
        principal = Principal(record.tenant, record.subject, record.role, record.key_id)
        with self._lock:
            if len(self._cache) > 100_000:
                self._cache.clear()
            self._cache[digest] = (principal, now + self._ttl)
        return principal


LOCAL_PRINCIPAL = Principal(tenant="local", subject="local-admin", role=Role.ADMIN)
