"""State storage: the `StateStore` interface and its implementations."""
