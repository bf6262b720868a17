"""An agent's memory repository, worked through pygit2 (libgit2): no `git` subprocess.

The repository lives at `<root>/<agent id>/`, with a working tree an agent or a person may
draft in. Cairn never reads the working tree: files are read from the tree of a commit,
one snapshot at a time, and commits are built in memory from that tree plus the changes.
The `main` branch mirrors the agent's revision; the state store holds the revision itself.
"""

from __future__ import annotations

import base64
import ctypes
import fcntl
import os
import re
import shutil
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pygit2
from pygit2.enums import FileMode, ObjectType, SortMode

from cairn_server.errors import NotFound

BRANCH = "refs/heads/main"
_AUTHOR = re.compile(r"\s*(?P<name>[^<>]+?)\s*<(?P<email>[^<>]+)>\s*")


@dataclass(frozen=True, slots=True)
class CommitInfo:
    """One commit of a memory repository."""

    revision: str
    message: str
    author: str
    time: float
    parents: tuple[str, ...]
    changed_paths: tuple[str, ...]


_libc = ctypes.CDLL(None, use_errno=True)


def sync_filesystem(path: Path) -> None:
    """Flushes the filesystem holding `path` to disk (one syncfs call for all the objects a
    commit wrote, instead of an fsync per object file and directory).

    The state store records a revision only after this returns, so a power loss cannot
    leave the agent at a commit whose objects never reached the disk.
    """
    fd = os.open(path, os.O_RDONLY)
    try:
        if _libc.syncfs(fd) != 0:
            error = ctypes.get_errno()
            raise OSError(error, f"syncfs failed: {os.strerror(error)}")
    finally:
        os.close(fd)


def signature(author: str, now: float) -> pygit2.Signature:
    """A git signature from `Name <email>` or a bare name."""
    match = _AUTHOR.fullmatch(author)
    if match:
        return pygit2.Signature(match["name"], match["email"], int(now), 0)
    name = author.strip() or "cairn"
    return pygit2.Signature(name, f"{name}@cairn.local", int(now), 0)


class MemoryRepo:
    """One agent's repository."""

    def __init__(self, path: Path, repo: pygit2.Repository, sync: bool = True) -> None:
        self.path = path
        self._repo = repo
        self.sync = sync

    # --- reading -------------------------------------------------------------------------

    def commit(self, revision: str) -> pygit2.Commit:
        """The commit a revision (full id or unique prefix) names."""
        try:
            obj = self._repo.revparse_single(revision)
        except (KeyError, ValueError, pygit2.GitError):
            raise NotFound(f"memory revision '{revision}' not found") from None
        if not isinstance(obj, pygit2.Commit):
            raise NotFound(f"memory revision '{revision}' is not a commit")
        return obj

    def read_files(self, revision: str) -> dict[str, str]:
        """Every file of one commit's tree: path -> text. One snapshot, never the worktree."""
        files: dict[str, str] = {}
        self._collect(self.commit(revision).tree, "", files)
        return files

    def _collect(self, tree: pygit2.Tree, prefix: str, out: dict[str, str]) -> None:
        for entry in tree:
            path = f"{prefix}{entry.name}"
            obj = self._repo[entry.id]
            if isinstance(obj, pygit2.Tree):
                self._collect(obj, f"{path}/", out)
            elif isinstance(obj, pygit2.Blob):
                out[path] = obj.data.decode("utf-8")

    def history(self, head: str, path: str = "") -> Iterator[CommitInfo]:
        """Commits reachable from `head`, newest first, optionally only those touching path."""
        for commit in self._repo.walk(self.commit(head).id, SortMode.TOPOLOGICAL | SortMode.TIME):
            parent = commit.parents[0].tree if commit.parents else None
            diff = (
                parent.diff_to_tree(commit.tree)
                if parent is not None
                else commit.tree.diff_to_tree(swap=True)
            )
            changed = tuple(
                sorted(
                    {d.new_file.path for d in diff.deltas} | {d.old_file.path for d in diff.deltas}
                )
            )
            if path and path not in changed:
                continue
            author = commit.author
            yield CommitInfo(
                revision=str(commit.id),
                message=commit.message,
                author=f"{author.name} <{author.email}>",
                time=float(author.time),
                parents=tuple(str(p) for p in commit.parent_ids),
                changed_paths=changed,
            )

    # --- writing -------------------------------------------------------------------------

    def _tree(self, files: Mapping[str, str]) -> pygit2.Oid:
        root: dict[str, object] = {}
        for path, text in files.items():
            node = root
            *dirs, name = path.split("/")
            for segment in dirs:
                node = node.setdefault(segment, {})  # type: ignore[assignment]
            node[name] = text
        return self._write_tree(root)

    def _write_tree(self, node: Mapping[str, object]) -> pygit2.Oid:
        builder = self._repo.TreeBuilder()
        for name, value in node.items():
            if isinstance(value, str):
                builder.insert(name, self._repo.create_blob(value.encode("utf-8")), FileMode.BLOB)
            else:
                builder.insert(name, self._write_tree(value), FileMode.TREE)  # type: ignore[arg-type]
        return builder.write()

    def write_commit(
        self, parent: str | None, files: Mapping[str, str], message: str, author: str, now: float
    ) -> str:
        """Writes a commit whose tree holds exactly `files`; moves no branch."""
        return self._create(parent, self._tree(files), message, author, now)

    def write_changes(
        self,
        parent: str,
        changes: Mapping[str, str | None],
        message: str,
        author: str,
        now: float,
    ) -> str:
        """Writes a commit of the parent's tree with `changes` applied (text, or None to
        delete). Only the changed files and the trees on their paths are written, so a
        commit costs what it changes, not the size of the memory."""
        nested: dict[str, object] = {}
        for path, text in changes.items():
            node = nested
            *dirs, name = path.split("/")
            for segment in dirs:
                node = node.setdefault(segment, {})  # type: ignore[assignment]
            node[name] = text
        tree = self._patch_tree(self.commit(parent).tree, nested)
        return self._create(parent, tree, message, author, now)

    def _patch_tree(self, base: pygit2.Tree | None, changes: Mapping[str, object]) -> pygit2.Oid:
        builder = self._repo.TreeBuilder(base) if base is not None else self._repo.TreeBuilder()
        for name, change in changes.items():
            if isinstance(change, dict):
                existing = base[name] if base is not None and name in base else None
                subtree = existing if isinstance(existing, pygit2.Tree) else None
                oid = self._patch_tree(subtree, change)
                if len(self._repo[oid]) == 0:  # type: ignore[arg-type]
                    if builder.get(name) is not None:
                        builder.remove(name)
                else:
                    builder.insert(name, oid, FileMode.TREE)
            elif change is None:
                if builder.get(name) is not None:
                    builder.remove(name)
            else:
                blob = self._repo.create_blob(str(change).encode("utf-8"))
                builder.insert(name, blob, FileMode.BLOB)
        return builder.write()

    def _create(
        self, parent: str | None, tree: pygit2.Oid, message: str, author: str, now: float
    ) -> str:
        sig = signature(author, now)
        committer = pygit2.Signature("cairn", "cairn@cairn.local", int(now), 0)
        parents = [self.commit(parent).id] if parent else []
        commit = str(self._repo.create_commit(None, sig, committer, message, tree, parents))
        if self.sync:
            sync_filesystem(self.path)
        return commit

    def set_branch(self, revision: str) -> None:
        """Points `main` (and so HEAD) at `revision`."""
        self._repo.references.create(BRANCH, pygit2.Oid(hex=revision), force=True)

    # --- portability ---------------------------------------------------------------------

    def export_objects(self, head: str) -> list[dict[str, str]]:
        """Every object reachable from `head`, raw, oldest commit's objects first."""
        seen: set[str] = set()
        out: list[dict[str, str]] = []
        commits = list(
            self._repo.walk(self.commit(head).id, SortMode.TOPOLOGICAL | SortMode.REVERSE)
        )
        for commit in commits:
            self._export_tree(commit.tree, seen, out)
            self._export(commit.id, seen, out)
        return out

    def _export_tree(self, tree: pygit2.Tree, seen: set[str], out: list[dict[str, str]]) -> None:
        for entry in tree:
            obj = self._repo[entry.id]
            if isinstance(obj, pygit2.Tree):
                self._export_tree(obj, seen, out)
            else:
                self._export(entry.id, seen, out)
        self._export(tree.id, seen, out)

    def _export(self, oid: pygit2.Oid, seen: set[str], out: list[dict[str, str]]) -> None:
        key = str(oid)
        if key in seen:
            return
        seen.add(key)
        kind, data = self._repo.odb.read(oid)
        out.append({"type": _TYPE_NAMES[kind], "data": base64.b64encode(data).decode()})

    def import_objects(self, objects: list[dict[str, str]]) -> None:
        """Writes raw objects; ids are recomputed by git, so they are exactly the exported."""
        for obj in objects:
            self._repo.odb.write(_TYPES[obj["type"]], base64.b64decode(obj["data"]))


_TYPES = {"commit": ObjectType.COMMIT, "tree": ObjectType.TREE, "blob": ObjectType.BLOB}
_TYPE_NAMES = {value: key for key, value in _TYPES.items()}


class MemoryRepos:
    """The repositories of all MEMFS agents under one root directory."""

    def __init__(self, root: Path, sync: bool = True) -> None:
        self.sync = sync
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self._cache: dict[str, MemoryRepo] = {}
        self._lock = threading.Lock()

    def _path(self, agent_id: str) -> Path:
        if not re.fullmatch(r"[A-Za-z0-9_-]+", agent_id):
            raise NotFound(f"agent '{agent_id}' not found")
        return self.root / agent_id

    def create(self, agent_id: str) -> MemoryRepo:
        """A new, empty repository for the agent."""
        path = self._path(agent_id)
        repo = pygit2.init_repository(str(path), bare=False, initial_head="main")
        # The branch only mirrors the revision the state store holds; a reflog adds nothing.
        repo.config["core.logAllRefUpdates"] = False
        memory = MemoryRepo(path, repo, self.sync)
        with self._lock:
            self._cache[agent_id] = memory
        return memory

    def open(self, agent_id: str) -> MemoryRepo:
        """The agent's repository."""
        with self._lock:
            found = self._cache.get(agent_id)
        if found is not None:
            return found
        path = self._path(agent_id)
        if not (path / ".git").exists():
            raise NotFound(f"the memory repository of agent '{agent_id}' is missing")
        memory = MemoryRepo(path, pygit2.Repository(str(path)), self.sync)
        with self._lock:
            self._cache[agent_id] = memory
        return memory

    def remove(self, agent_id: str) -> None:
        """Deletes the agent's repository."""
        with self._lock:
            self._cache.pop(agent_id, None)
        shutil.rmtree(self._path(agent_id), ignore_errors=True)

    @contextmanager
    def locked(self, agent_id: str) -> Iterator[None]:
        """An advisory file lock on the agent's repository, across processes."""
        path = self._path(agent_id)
        path.mkdir(parents=True, exist_ok=True)
        with (path / ".cairn.lock").open("w") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)
