"""`python -m cairn_server.healthcheck --port P`: exit 0 when the server says SERVING.

Used by the container images' HEALTHCHECK; Kubernetes uses its native gRPC probes.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc


def main(argv: list[str] | None = None) -> int:
    """Checks one server's health service."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--service", default="", help="service name; empty: the whole server")
    parser.add_argument("--timeout", type=float, default=3.0)
    args = parser.parse_args(argv)
    with grpc.insecure_channel(f"{args.host}:{args.port}") as channel:
        stub: Any = health_pb2_grpc.HealthStub(channel)  # its type stubs lack Check
        try:
            reply = stub.Check(
                health_pb2.HealthCheckRequest(service=args.service), timeout=args.timeout
            )
        except grpc.RpcError as error:
            print(f"unhealthy: {error.code().name}", file=sys.stderr)
            return 1
    if reply.status != health_pb2.HealthCheckResponse.SERVING:
        print(f"unhealthy: {health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
