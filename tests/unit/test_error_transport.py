"""Errors across a process boundary: the same class, fields and message come back."""

from __future__ import annotations

import pickle

from cairn_server.error_transport import RemoteFailure, decode_error, encode_error
from cairn_server.errors import InvalidArgument, NotFound, Unavailable
from recall_service.projections.vector_worker import VectorIndexBusy


def round_trip(error: BaseException) -> Exception:
    """Encoded, pickled as a socket would carry it, unpickled and decoded."""
    return decode_error(pickle.loads(pickle.dumps(encode_error(error))))


def test_an_invalid_argument_keeps_its_field_and_description() -> None:
    back = round_trip(InvalidArgument("query.top_k", "must be 1-100, got 0"))
    assert type(back) is InvalidArgument
    assert back.field == "query.top_k"
    assert back.description == "must be 1-100, got 0"
    assert back.message == "query.top_k: must be 1-100, got 0"
    assert back.code_name == "INVALID_ARGUMENT"


def test_a_cairn_error_keeps_its_class_and_message() -> None:
    back = round_trip(NotFound("stream 's' not found"))
    assert type(back) is NotFound
    assert back.message == "stream 's' not found"
    assert str(back) == "stream 's' not found"


def test_a_subclass_defined_outside_the_errors_module_comes_back_as_itself() -> None:
    back = round_trip(VectorIndexBusy("the vector index is building its search graph"))
    assert type(back) is VectorIndexBusy
    assert isinstance(back, Unavailable)
    assert back.code_name == "UNAVAILABLE"
    assert back.message == "the vector index is building its search graph"


def test_any_other_error_becomes_a_remote_failure_naming_it() -> None:
    back = round_trip(ZeroDivisionError("division by zero"))
    assert type(back) is RemoteFailure
    assert str(back) == "ZeroDivisionError: division by zero"
