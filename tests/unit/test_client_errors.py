"""cairn.errors: each gRPC code becomes its typed exception, with BadRequest field details."""

from __future__ import annotations

from typing import Any

import grpc
import pytest
from google.protobuf import any_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status

from cairn import errors


class FakeRpcError(grpc.RpcError):
    """A failed call as grpc raises it."""

    def __init__(self, code: grpc.StatusCode, details: str | None, trailing: Any = ()) -> None:
        self._code, self._details, self._trailing = code, details, trailing

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str | None:
        return self._details

    def trailing_metadata(self) -> Any:
        return self._trailing


def bad_request_trailer(message: str, *violations: tuple[str, str], code: int = 3) -> Any:
    detail = any_pb2.Any()
    detail.Pack(
        error_details_pb2.BadRequest(
            field_violations=[
                error_details_pb2.BadRequest.FieldViolation(field=f, description=d)
                for f, d in violations
            ]
        )
    )
    status = status_pb2.Status(code=code, message=message, details=[detail])
    return rpc_status.to_status(status).trailing_metadata


@pytest.mark.parametrize(
    ("code", "cls"),
    [
        (grpc.StatusCode.INVALID_ARGUMENT, errors.InvalidArgument),
        (grpc.StatusCode.NOT_FOUND, errors.NotFound),
        (grpc.StatusCode.ALREADY_EXISTS, errors.AlreadyExists),
        (grpc.StatusCode.ABORTED, errors.Aborted),
        (grpc.StatusCode.FAILED_PRECONDITION, errors.FailedPrecondition),
        (grpc.StatusCode.PERMISSION_DENIED, errors.PermissionDenied),
        (grpc.StatusCode.UNAUTHENTICATED, errors.Unauthenticated),
        (grpc.StatusCode.RESOURCE_EXHAUSTED, errors.ResourceExhausted),
        (grpc.StatusCode.UNAVAILABLE, errors.Unavailable),
        (grpc.StatusCode.DEADLINE_EXCEEDED, errors.DeadlineExceeded),
        (grpc.StatusCode.INTERNAL, errors.Internal),
        (grpc.StatusCode.UNIMPLEMENTED, errors.Unimplemented),
        (grpc.StatusCode.CANCELLED, errors.Cancelled),
    ],
)
def test_each_code_raises_its_own_class(code: grpc.StatusCode, cls: type) -> None:
    error = errors.from_rpc_error(FakeRpcError(code, "what happened"), attempts=3)
    assert type(error) is cls
    assert isinstance(error, errors.CairnError)
    assert (error.code, error.details, error.attempts) == (code, "what happened", 3)
    assert str(error) == f"{code.name}: what happened (after 3 attempts)"


@pytest.mark.parametrize(
    "code",
    [grpc.StatusCode.UNKNOWN, grpc.StatusCode.OUT_OF_RANGE, grpc.StatusCode.DATA_LOSS],
)
def test_codes_without_a_class_raise_the_base_class(code: grpc.StatusCode) -> None:
    error = errors.from_rpc_error(FakeRpcError(code, "odd"))
    assert type(error) is errors.CairnError
    assert (error.code, error.details, error.attempts) == (code, "odd", 1)


def test_a_single_attempt_is_not_mentioned() -> None:
    error = errors.from_rpc_error(FakeRpcError(grpc.StatusCode.NOT_FOUND, "agent 'x' not found"))
    assert str(error) == "NOT_FOUND: agent 'x' not found"


def test_missing_details_leave_the_code_alone_in_the_message() -> None:
    error = errors.from_rpc_error(FakeRpcError(grpc.StatusCode.INTERNAL, None))
    assert (str(error), error.details) == ("INTERNAL", "")


def test_an_error_without_a_code_is_unknown() -> None:
    error = errors.from_rpc_error(grpc.RpcError())
    assert (type(error), error.code, error.details) == (
        errors.CairnError,
        grpc.StatusCode.UNKNOWN,
        "",
    )


def test_bad_request_field_violations_are_parsed() -> None:
    message = "block.label: must not be empty"
    trailer = bad_request_trailer(
        message, ("block.label", "must not be empty"), ("block.limit", "must be at least 1")
    )
    error = errors.from_rpc_error(FakeRpcError(grpc.StatusCode.INVALID_ARGUMENT, message, trailer))
    assert isinstance(error, errors.InvalidArgument)
    assert error.field_violations == (
        errors.FieldViolation("block.label", "must not be empty"),
        errors.FieldViolation("block.limit", "must be at least 1"),
    )


def test_invalid_argument_without_details_has_no_violations() -> None:
    error = errors.from_rpc_error(FakeRpcError(grpc.StatusCode.INVALID_ARGUMENT, "bad"))
    assert isinstance(error, errors.InvalidArgument)
    assert error.field_violations == ()


def test_a_status_detail_that_contradicts_the_call_is_ignored() -> None:
    trailer = bad_request_trailer("another message", ("x", "y"))
    error = errors.from_rpc_error(
        FakeRpcError(grpc.StatusCode.INVALID_ARGUMENT, "the real message", trailer)
    )
    assert isinstance(error, errors.InvalidArgument)
    assert error.field_violations == ()


def test_details_of_other_types_are_skipped() -> None:
    detail = any_pb2.Any()
    detail.Pack(error_details_pb2.RetryInfo())
    status = status_pb2.Status(code=code_pb2.INVALID_ARGUMENT, message="m", details=[detail])
    trailer = rpc_status.to_status(status).trailing_metadata
    error = errors.from_rpc_error(FakeRpcError(grpc.StatusCode.INVALID_ARGUMENT, "m", trailer))
    assert isinstance(error, errors.InvalidArgument)
    assert error.field_violations == ()
