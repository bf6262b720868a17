"""Plain Python values to and from their protobuf forms: enums, times, structs, JSON text.

Times are exact to the microsecond (what the servers store) and always timezone-aware UTC.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any, Generic, Protocol, TypeVar

from google.protobuf import json_format, struct_pb2, timestamp_pb2

from cairn import enums
from cairn.v1 import common_pb2, recall_pb2, state_pb2

__all__ = [
    "EnumCodec",
    "from_struct",
    "from_timestamp",
    "json_object",
    "json_text",
    "optional_timestamp",
    "to_struct",
    "to_timestamp",
]

E = TypeVar("E", bound=StrEnum)
V = TypeVar("V", bound=int)
V_co = TypeVar("V_co", bound=int, covariant=True)
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class _EnumWrapper(Protocol[V_co]):
    def Value(self, name: str) -> V_co: ...  # noqa: N802 (protobuf's name)


class EnumCodec(Generic[E, V]):
    """Maps a Python enum to a protobuf enum by name: `MessageRole.USER` is
    `MESSAGE_ROLE_USER`. Built at import, so a member the contract lacks fails at once."""

    def __init__(self, enum: type[E], wrapper: _EnumWrapper[V], prefix: str) -> None:
        self._enum = enum
        self._numbers = {member: wrapper.Value(prefix + member.name) for member in enum}
        self._members: dict[int, E] = {number: member for member, number in self._numbers.items()}

    def encode(self, member: E | str) -> V:
        """The protobuf number of a member (or of its string value)."""
        return self._numbers[self._enum(member)]

    def decode(self, number: int) -> E:
        """The member for a number; `UNSPECIFIED` for a number this client does not know."""
        member = self._members.get(number)
        return self._enum("unspecified") if member is None else member


MESSAGE_ROLE = EnumCodec(enums.MessageRole, common_pb2.MessageRole, "MESSAGE_ROLE_")
MEMORY_MODE = EnumCodec(enums.MemoryMode, state_pb2.MemoryMode, "MEMORY_MODE_")
MEMORY_UPDATE_MODE = EnumCodec(
    enums.MemoryUpdateMode, state_pb2.MemoryUpdateMode, "MEMORY_UPDATE_MODE_"
)
TOOL_RULE_TYPE = EnumCodec(enums.ToolRuleType, state_pb2.ToolRuleType, "TOOL_RULE_TYPE_")
CONTEXT_STATUS = EnumCodec(enums.ContextStatus, state_pb2.ContextStatus, "CONTEXT_STATUS_")
CONTEXT_VIEW = EnumCodec(enums.ContextView, state_pb2.ContextView, "CONTEXT_VIEW_")
EVENT_TYPE = EnumCodec(enums.EventType, state_pb2.EventType, "EVENT_TYPE_")
MEMORY_TOOL_ERROR = EnumCodec(
    enums.MemoryToolError, state_pb2.MemoryToolError, "MEMORY_TOOL_ERROR_"
)
STREAM_KIND = EnumCodec(enums.StreamKind, recall_pb2.StreamKind, "STREAM_KIND_")
PARTICIPANT_ROLE = EnumCodec(enums.ParticipantRole, recall_pb2.ParticipantRole, "PARTICIPANT_ROLE_")
RECORD_KIND = EnumCodec(enums.RecordKind, recall_pb2.RecordKind, "RECORD_KIND_")


def from_timestamp(ts: timestamp_pb2.Timestamp) -> datetime:
    """A UTC datetime, exact to the microsecond."""
    return EPOCH + timedelta(seconds=ts.seconds, microseconds=ts.nanos // 1000)


def optional_timestamp(message: Any, field: str) -> datetime | None:
    """`message.field` as a datetime, or None when the field is unset."""
    if not message.HasField(field):
        return None
    return from_timestamp(getattr(message, field))


def to_timestamp(value: datetime) -> timestamp_pb2.Timestamp:
    """A Timestamp from a timezone-aware datetime (naive ones are refused: their zone is
    a guess)."""
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(f"times must be timezone-aware, got naive {value.isoformat()}")
    delta = value - EPOCH
    return timestamp_pb2.Timestamp(
        seconds=delta.days * 86_400 + delta.seconds, nanos=delta.microseconds * 1000
    )


def from_struct(struct: struct_pb2.Struct) -> dict[str, Any]:
    """A Struct as a dict (numbers come back as floats: a Struct has no integers)."""
    return json_format.MessageToDict(struct)


def to_struct(values: Mapping[str, Any] | None) -> struct_pb2.Struct:
    """A dict as a Struct."""
    struct = struct_pb2.Struct()
    if values:
        struct.update(dict(values))
    return struct


def json_object(text: str) -> dict[str, Any]:
    """A JSON object from text ("" is {})."""
    value = json.loads(text) if text else {}
    if not isinstance(value, dict):
        raise ValueError(f"expected a JSON object, got {type(value).__name__}")
    return value


def json_text(value: Mapping[str, Any] | None) -> str:
    """A dict as compact JSON text ("" for None)."""
    return "" if value is None else json.dumps(dict(value), separators=(",", ":"))
