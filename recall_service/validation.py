"""Input checks for the recall service; each failure names the field and the rule."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from cairn_server.errors import InvalidArgument

DEFAULT_MAX_CONTENT_BYTES = 64 * 1024
MAX_TAGS = 64
MAX_TAG_LENGTH = 100
MAX_METADATA_BYTES = 16 * 1024
MAX_IDEMPOTENCY_KEY = 200
MAX_BATCH = 1000
MAX_REASON_BYTES = 4096
MAX_OVERLAP_SECONDS = 86_400.0

_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:@-]{0,127}")


def check_id(field: str, value: str, what: str) -> None:
    """Stream and agent ids: 1-128 characters of [A-Za-z0-9_.:@-], starting alphanumeric."""
    if not value:
        raise InvalidArgument(field, f"must name {what}")
    if not _ID_RE.fullmatch(value):
        raise InvalidArgument(
            field,
            f"{value!r} is not a valid id: use 1-128 characters of [A-Za-z0-9_.:@-], "
            "starting with a letter or digit",
        )


# PostgreSQL text cannot hold U+0000, and a log accepts the same input whichever store
# holds it, so neither store takes it.
_NUL = "must not contain NUL characters (U+0000)"


def check_content(field: str, content: str, max_bytes: int) -> None:
    """Content is 1 byte to `max_bytes` bytes of UTF-8, without U+0000."""
    if not content:
        raise InvalidArgument(field, "must not be empty")
    if "\x00" in content:
        raise InvalidArgument(field, _NUL)
    size = len(content.encode("utf-8"))
    if size > max_bytes:
        raise InvalidArgument(
            field, f"is {size} bytes of UTF-8, over the limit of {max_bytes} bytes"
        )


def normalise_tags(field: str, tags: Sequence[str]) -> tuple[str, ...]:
    """Up to 64 tags of 1-100 printable characters; duplicates dropped, order kept."""
    if len(tags) > MAX_TAGS:
        raise InvalidArgument(field, f"at most {MAX_TAGS} tags, got {len(tags)}")
    for i, tag in enumerate(tags):
        if not tag or len(tag) > MAX_TAG_LENGTH or not tag.isprintable():
            raise InvalidArgument(
                f"{field}[{i}]", f"tags are 1-{MAX_TAG_LENGTH} printable characters, got {tag!r}"
            )
    return tuple(dict.fromkeys(tags))


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def canonical_metadata(field: str, text: str) -> str:
    """Parses a JSON object and returns it canonical: sorted keys, no spaces, UTF-8 text.

    Empty text means {}. NaN and Infinity are refused (they are not JSON).
    """
    if not text.strip():
        return "{}"
    if len(text.encode("utf-8")) > MAX_METADATA_BYTES:
        raise InvalidArgument(field, f"is over the limit of {MAX_METADATA_BYTES} bytes")
    try:
        value = json.loads(text, parse_constant=_reject_constant)
    except (ValueError, RecursionError) as error:
        raise InvalidArgument(field, f"is not valid JSON: {error}") from None
    if not isinstance(value, dict):
        raise InvalidArgument(field, f"must be a JSON object, got {_json_type(value)}")
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _json_type(value: object) -> str:
    if isinstance(value, list):
        return "an array"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    return "null"


def check_idempotency_key(field: str, key: str) -> None:
    """Optional; at most 200 printable characters."""
    if len(key) > MAX_IDEMPOTENCY_KEY or not key.isprintable():
        raise InvalidArgument(field, f"must be at most {MAX_IDEMPOTENCY_KEY} printable characters")


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _iso(micros: int) -> str:
    """A time in µs as ISO 8601 UTC, exact to the microsecond."""
    return (_EPOCH + timedelta(microseconds=micros)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def check_occurred_at(field: str, occurred_at: int, now: int) -> None:
    """When a message was said (µs): from 1970 on, and not later than the server's time."""
    if occurred_at < 0:
        raise InvalidArgument(field, "must be on or after 1970-01-01T00:00:00Z")
    if occurred_at > now:
        raise InvalidArgument(
            field,
            f"is {_iso(occurred_at)}, later than the server's time {_iso(now)}: a message "
            "cannot have been said after it was written",
        )


def check_reason(field: str, reason: str) -> None:
    """A redaction reason: at most 4096 bytes, without U+0000."""
    if len(reason.encode("utf-8")) > MAX_REASON_BYTES:
        raise InvalidArgument(field, f"is over the limit of {MAX_REASON_BYTES} bytes")
    if "\x00" in reason:
        raise InvalidArgument(field, _NUL)


def check_window(field: str, seconds: float) -> None:
    """An overlap window: more than 0 and at most one day."""
    if not (math.isfinite(seconds) and 0 < seconds <= MAX_OVERLAP_SECONDS):
        raise InvalidArgument(
            field, f"must be more than 0 and at most {MAX_OVERLAP_SECONDS:g}, got {seconds:g}"
        )
