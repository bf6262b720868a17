"""Cairn's Python client: generated stubs in `cairn.v1`, hand-written helpers beside them."""
