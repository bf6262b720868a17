"""When the indexer builds the vector index's search graph (`should_optimize`): never while
records arrive, never with a backlog still to index, never for a handful of vectors."""

from __future__ import annotations

import pytest

from recall_service.indexer import IndexerSettings, should_optimize

SETTINGS = IndexerSettings(optimize_after=20_000, optimize_idle_seconds=2.0)


def test_a_quiet_caught_up_index_with_enough_new_vectors_is_built() -> None:
    assert should_optimize(SETTINGS, 20_000, applied=0, quiet_seconds=2.0) is True


@pytest.mark.parametrize(
    ("unoptimized", "applied", "quiet", "why"),
    [
        (19_999, 0, 60.0, "too few vectors since the last build"),
        (300_000, 0, 1.9, "the log is still being written"),
        (300_000, 1_024, 60.0, "the last pass applied records: there may be a backlog"),
    ],
)
def test_no_build_when(unoptimized: int, applied: int, quiet: float, why: str) -> None:
    assert should_optimize(SETTINGS, unoptimized, applied, quiet) is False, why


def test_optimize_after_zero_turns_builds_off() -> None:
    off = IndexerSettings(optimize_after=0)
    assert should_optimize(off, 10**6, applied=0, quiet_seconds=3600.0) is False
