"""Maps domain errors to gRPC status, with a `google.rpc.BadRequest` for field errors."""

from __future__ import annotations

import grpc
from google.protobuf import any_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status

from cairn_server.errors import CairnError, InvalidArgument

_CODES: dict[str, grpc.StatusCode] = {code.name: code for code in grpc.StatusCode}


def grpc_code(error: CairnError) -> grpc.StatusCode:
    """The gRPC code for a domain error."""
    return _CODES[error.code_name]


def to_status(error: CairnError) -> grpc.Status:
    """A rich status: code, message and, for InvalidArgument, a BadRequest detail."""
    code = grpc_code(error)
    status = status_pb2.Status(code=getattr(code_pb2, code.name), message=error.message)
    if isinstance(error, InvalidArgument) and error.field:
        detail = any_pb2.Any()
        detail.Pack(
            error_details_pb2.BadRequest(
                field_violations=[
                    error_details_pb2.BadRequest.FieldViolation(
                        field=error.field, description=error.description
                    )
                ]
            )
        )
        status.details.append(detail)
    return rpc_status.to_status(status)
