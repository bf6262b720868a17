"""Parsed memory files per commit. A commit never changes, so its files are cached by id."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass

from state_service.memfs.files import MemoryFileData, parse_file
from state_service.memfs.render import available_skills, render_memfs
from state_service.memfs.repo import MemoryRepos


@dataclass(frozen=True, slots=True)
class Snapshot:
    """One commit's files, its rendered memory and its skills list."""

    revision: str
    files: dict[str, MemoryFileData]
    memory: tuple[str, ...]
    skills: str


class MemorySnapshots:
    """Reads and renders commits of MEMFS repositories, each once."""

    def __init__(self, repos: MemoryRepos, size: int = 1024) -> None:
        self.repos = repos
        self._cache: OrderedDict[tuple[str, str], Snapshot] = OrderedDict()
        self._size = size
        self._lock = threading.Lock()

    def get(self, agent_id: str, revision: str) -> Snapshot:
        """The snapshot of `revision` (a full commit id) of the agent's repository."""
        key = (agent_id, revision)
        with self._lock:
            found = self._cache.get(key)
            if found is not None:
                self._cache.move_to_end(key)
                return found
        texts = self.repos.open(agent_id).read_files(revision)
        # Committed files passed validation when they were committed.
        files = {path: parse_file(path, path, text) for path, text in texts.items()}
        return self._store(agent_id, revision, files)

    def derive(
        self,
        agent_id: str,
        base: Snapshot,
        revision: str,
        changes: Mapping[str, MemoryFileData | None],
    ) -> Snapshot:
        """The snapshot of a commit made from `base` with `changes`, without reading it back."""
        files = dict(base.files)
        for path, file in changes.items():
            if file is None:
                files.pop(path, None)
            else:
                files[path] = file
        return self._store(agent_id, revision, files)

    def _store(self, agent_id: str, revision: str, files: dict[str, MemoryFileData]) -> Snapshot:
        snapshot = Snapshot(revision, files, tuple(render_memfs(files)), available_skills(files))
        with self._lock:
            self._cache[(agent_id, revision)] = snapshot
            while len(self._cache) > self._size:
                self._cache.popitem(last=False)
        return snapshot
