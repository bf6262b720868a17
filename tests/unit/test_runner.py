"""The group-commit runner: every job of a group gets its own answer, on its own event loop,
after the group's one commit."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from cairn_server.runner import Runner


def test_a_group_answers_each_job_on_its_own_loop_after_one_commit() -> None:
    commits: list[list[str]] = []
    ran: list[str] = []
    holding, queued = threading.Event(), threading.Event()

    @contextmanager
    def batch() -> Iterator[None]:
        start = len(ran)
        yield
        commits.append(ran[start:])

    runner = Runner(inline_reads=True, batch=batch)

    def job(name: str) -> str:
        if name == "hold":  # keeps the writer busy until the others are queued together
            holding.set()
            queued.wait(5)
        if name.startswith("bad"):
            raise ValueError(name)
        ran.append(name)
        return name.upper()

    async def calls(names: list[str], ready: threading.Barrier) -> list[object]:
        pending = [asyncio.ensure_future(runner.write(job, n)) for n in names]
        await asyncio.sleep(0)  # every job is queued
        ready.wait(5)
        return await asyncio.gather(*pending, return_exceptions=True)

    results: dict[str, list[object]] = {}
    ready = threading.Barrier(2, action=queued.set)

    def loop_of(key: str, names: list[str]) -> None:
        results[key] = asyncio.run(calls(names, ready))

    hold = threading.Thread(target=lambda: asyncio.run(runner.write(job, "hold")))
    hold.start()
    assert holding.wait(5)
    threads = [
        threading.Thread(target=loop_of, args=("a", ["a1", "bad-a", "a2"])),
        threading.Thread(target=loop_of, args=("b", ["b1"])),
    ]
    for thread in threads:
        thread.start()
    for thread in (hold, *threads):
        thread.join(10)
    runner.close()

    assert results["a"][0] == "A1" and results["a"][2] == "A2"
    assert isinstance(results["a"][1], ValueError) and str(results["a"][1]) == "bad-a"
    assert results["b"] == ["B1"]
    # One group holds all four jobs, in the order the two loops queued them.
    assert commits[0] == ["hold"]
    assert commits[1] in (["a1", "a2", "b1"], ["b1", "a1", "a2"])
    assert len(commits) == 2
