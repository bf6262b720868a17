"""Opaque page tokens bound to the query that issued them.

A token holds the last key returned (a monotonically increasing row key), so pages stay
stable while other clients insert. It also holds a fingerprint of the query's filters: a
token replayed against another query is refused instead of silently skipping rows.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass

from cairn_server.errors import InvalidArgument

DEFAULT_PAGE_SIZE = 100
MAX_PAGE_SIZE = 1000


@dataclass(frozen=True, slots=True)
class Page:
    """A validated page request: how many rows, and the key after which to start."""

    size: int
    after: int


def fingerprint(*parts: object) -> str:
    """A short hash of a query's filters."""
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:16]


def parse_page(page_size: int, page_token: str, query: str) -> Page:
    """Validates page_size (0 means the default) and decodes page_token for `query`."""
    page_size = _size(page_size)
    if not page_token:
        return Page(page_size, 0)
    try:
        after = int(_decode(page_token, query)["a"])  # type: ignore[call-overload]
    except (ValueError, KeyError, TypeError):
        raise InvalidArgument("page_token", "is not a token this server issued") from None
    return Page(page_size, after)


def _decode(page_token: str, query: str) -> dict[str, object]:
    try:
        raw = json.loads(base64.urlsafe_b64decode(page_token.encode() + b"=" * 4))
        issued_for = str(raw["q"])
    except (ValueError, KeyError, TypeError):
        raise InvalidArgument("page_token", "is not a token this server issued") from None
    if issued_for != query:
        raise InvalidArgument(
            "page_token", "was issued for a different query; keep the filters of the first page"
        )
    return dict(raw)


def _encode(payload: dict[str, object]) -> str:
    raw = json.dumps(payload, separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def next_token(keys: list[int], page: Page, query: str) -> str:
    """The token for the page after one that returned rows with `keys` (empty at the end).

    Callers fetch `page.size + 1` rows; a full extra row means there is a next page.
    """
    if len(keys) <= page.size:
        return ""
    return _encode({"a": keys[page.size - 1], "q": query})


def _size(page_size: int) -> int:
    if page_size == 0:
        return DEFAULT_PAGE_SIZE
    if not 1 <= page_size <= MAX_PAGE_SIZE:
        raise InvalidArgument(
            "page_size", f"must be between 1 and {MAX_PAGE_SIZE}, got {page_size}"
        )
    return page_size


def parse_cursor(page_size: int, page_token: str, query: str) -> tuple[int, dict[str, object]]:
    """Like `parse_page`, for listings whose position is not a row key: returns the page
    size and the cursor the previous page left (empty on the first page)."""
    size = _size(page_size)
    if not page_token:
        return size, {}
    try:
        cursor = dict(_decode(page_token, query)["c"])  # type: ignore[call-overload]
    except (ValueError, KeyError, TypeError):
        raise InvalidArgument("page_token", "is not a token this server issued") from None
    return size, cursor


def next_cursor(rows: Sequence[object], size: int, cursor: dict[str, object], query: str) -> str:
    """The token resuming at `cursor` when more than `size` rows were found, else empty."""
    if len(rows) <= size:
        return ""
    return _encode({"c": cursor, "q": query})
