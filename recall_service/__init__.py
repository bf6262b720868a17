"""Recall service: shared, hash-chained record streams and hybrid search over them."""
