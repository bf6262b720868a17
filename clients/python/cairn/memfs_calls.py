"""The state service's MemFS methods: git-backed memory files of MEMFS agents.

Each function builds the call for the client method of the same name (`client.state.<name>`)
and its docstring documents that method; `timeout` as in `agent_calls`. Every method raises
FailedPrecondition when the agent is not a MEMFS agent, and NotFound when there is no such
agent.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from cairn import state_convert as convert
from cairn.calls import DEFAULT_PAGE_SIZE, Call, Paged, paged
from cairn.state_types import CommittedFiles, MemoryCommit, MemoryFile, RevertedMemory
from cairn.v1 import state_pb2


def commit_memory_files(
    agent_id: str,
    *,
    upserts: Mapping[str, str] | None = None,
    deletes: Sequence[str] = (),
    message: str = "",
    author: str = "",
    expected_revision: str = "",
    timeout: float | None = None,
) -> Call[CommittedFiles]:
    """Writes files (`upserts`: path -> whole file, frontmatter included) and deletes paths
    as one git commit, or nothing; the new revision is the agent's memory revision. Raises
    InvalidArgument (a path or file breaks a rule of docs/memfs.md), NotFound (a deleted path
    does not exist) or Aborted (`expected_revision` is not the current one)."""
    return Call(
        "state",
        "CommitMemoryFiles",
        state_pb2.CommitMemoryFilesRequest(
            agent_id=agent_id,
            upserts=[
                state_pb2.MemoryFileWrite(path=path, content=content)
                for path, content in (upserts or {}).items()
            ],
            deletes=list(deletes),
            message=message,
            author=author,
            expected_revision=expected_revision,
        ),
        lambda r: CommittedFiles(r.revision, tuple(r.changed_paths), r.prompt_rebuilt),
        idempotent=False,
        timeout=timeout,
    )


def list_memory_files(
    agent_id: str, *, revision: str = "", timeout: float | None = None
) -> Call[list[MemoryFile]]:
    """Returns every memory file at `revision` (default: the current one), sorted by path.
    Raises NotFound (no such revision)."""
    return Call(
        "state",
        "ListMemoryFiles",
        state_pb2.ListMemoryFilesRequest(agent_id=agent_id, revision=revision),
        lambda r: [convert.memory_file(f, r.revision) for f in r.files],
        idempotent=True,
        timeout=timeout,
    )


def get_memory_file(
    agent_id: str, path: str, *, revision: str = "", timeout: float | None = None
) -> Call[MemoryFile]:
    """Returns one memory file at `revision` (default: the current one). Raises NotFound (no
    such revision or path)."""
    return Call(
        "state",
        "GetMemoryFile",
        state_pb2.GetMemoryFileRequest(agent_id=agent_id, path=path, revision=revision),
        lambda r: convert.memory_file(r.file, r.revision),
        idempotent=True,
        timeout=timeout,
    )


def memory_history(
    agent_id: str,
    *,
    path: str = "",
    page_size: int = DEFAULT_PAGE_SIZE,
    timeout: float | None = None,
) -> Paged[MemoryCommit]:
    """Iterates over the commits of the agent's memory, newest first, only those that
    changed `path` when given."""
    return paged(
        "state",
        "MemoryHistory",
        lambda token: state_pb2.MemoryHistoryRequest(
            agent_id=agent_id, path=path, page_size=page_size, page_token=token
        ),
        lambda r: [convert.memory_commit(c) for c in r.commits],
        timeout,
    )


def revert_memory(
    agent_id: str,
    revision: str,
    *,
    expected_revision: str = "",
    message: str = "",
    author: str = "",
    timeout: float | None = None,
) -> Call[RevertedMemory]:
    """Makes a new commit whose files are those of `revision`: the prompt compiles as it did
    then. Raises NotFound (no such revision) or Aborted (`expected_revision` is stale)."""
    return Call(
        "state",
        "RevertMemory",
        state_pb2.RevertMemoryRequest(
            agent_id=agent_id,
            revision=revision,
            expected_revision=expected_revision,
            message=message,
            author=author,
        ),
        lambda r: RevertedMemory(r.revision, tuple(r.changed_paths)),
        idempotent=False,
        timeout=timeout,
    )
