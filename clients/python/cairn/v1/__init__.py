"""Generated protobuf and gRPC stubs for the `cairn.v1` package (do not edit; run scripts/gen-stubs)."""
