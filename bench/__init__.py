"""Benchmarks and evaluations; each prints one JSON object of figures measured in one run."""
