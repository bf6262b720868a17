"""MemFS operations: commit, read, history and revert of a MEMFS agent's memory files.

The agent's revision lives in the state store and moves only inside a store transaction
(compare-and-set on the current commit), together with the prompt rebuilt from the new
commit; git's `main` branch mirrors it. Git objects written by a transaction that then
fails are unreferenced and harmless.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from cairn_server.auth import Principal
from cairn_server.errors import (
    Aborted,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
)
from cairn_server.paging import fingerprint, next_cursor, parse_cursor
from state_service import access
from state_service.core import Deps, agent_not_found
from state_service.memfs.files import (
    MemoryFileData,
    check_change,
    check_path,
    parse_file,
    render_file,
)
from state_service.memfs.repo import CommitInfo
from state_service.models import (
    DEFAULT_BLOCK_LIMIT,
    Agent,
    AgentEvent,
    Block,
    EventKind,
    MemoryMode,
    MemoryUpdateMode,
)
from state_service.prompts import rebuild_events
from state_service.store.base import StateTx


@dataclass(frozen=True, slots=True)
class Committed:
    """The outcome of a commit."""

    revision: str
    changed_paths: list[str]
    prompt_rebuilt: bool


def block_files(blocks: Sequence[Block]) -> dict[str, str]:
    """The files a MEMFS agent's initial blocks become: `system/<label>.md`."""
    files = {}
    for i, block in enumerate(blocks):
        if not block.description.strip():
            raise InvalidArgument(
                f"memory_blocks[{i}].description",
                "a MEMFS agent's blocks become system/<label>.md files, which need a description",
            )
        limit = None if block.limit == DEFAULT_BLOCK_LIMIT else block.limit
        files[f"system/{block.label}.md"] = render_file(
            block.description, block.value, block.read_only, limit
        )
    return files


def create_repository(deps: Deps, agent: Agent, blocks: Sequence[Block], author: str) -> str:
    """Creates the agent's repository with its blocks as the first commit; returns its id."""
    files = block_files(blocks)
    for path, text in files.items():
        check_path(path, path)
        parse_file(path, path, text)
    repo = deps.snapshots().repos.create(agent.id)
    head = repo.write_commit(None, files, f"Create memory of {agent.name}", author, deps.clock())
    repo.set_branch(head)
    return head


def _memfs_agent(tx: StateTx, principal: Principal, agent_id: str, action: str) -> Agent:
    access.require_agent_access(principal, agent_id, action)
    agent = tx.get_agent(principal.tenant, agent_id)
    if agent is None:
        raise agent_not_found(agent_id)
    return _require_memfs(agent)


def _require_memfs(agent: Agent) -> Agent:
    if agent.memory_mode is not MemoryMode.MEMFS:
        raise FailedPrecondition(
            f"agent '{agent.id}' keeps its memory in blocks, not files; only MEMFS agents "
            "have memory files"
        )
    return agent


def move_head(
    deps: Deps,
    tx: StateTx,
    agent: Agent,
    new_head: str,
    changed: list[str],
    now: float,
) -> Committed:
    """Moves the agent to `new_head` in `tx`: counter, prompt, events, branch."""
    agent.memory_head = new_head
    agent.memory_revision += 1
    agent.memory_updated_at = now
    tx.set_memory_head(agent.tenant, agent.id, new_head, agent.memory_revision, now)
    events = [
        AgentEvent(
            kind=EventKind.BLOCK_UPDATED,
            tenant=agent.tenant,
            agent_id=agent.id,
            memory_revision=new_head,
            context_version=agent.context_version,
            agent_version=agent.version,
            time=now,
        )
    ]
    rebuilt = agent.memory_update_mode is MemoryUpdateMode.SYSTEM_PROMPT
    # The snapshot of the new head is read from the repository on first use.
    if rebuilt:
        prompt = deps.build_prompt(agent, now)
        tx.save_prompts([prompt])
        events += rebuild_events([agent], [prompt], now)
    tx.emit(events)
    deps.snapshots().repos.open(agent.id).set_branch(new_head)
    return Committed(new_head, changed, rebuilt)


def _check_expected(agent: Agent, expected: str) -> None:
    if expected and expected != agent.memory_head:
        raise Aborted(
            f"agent '{agent.id}' memory is at revision {agent.memory_head}, not the expected "
            f"{expected}; read it again and retry"
        )


def commit_files(
    deps: Deps,
    principal: Principal,
    agent_id: str,
    upserts: Sequence[tuple[str, str]],
    deletes: Sequence[str],
    message: str,
    author: str,
    expected_revision: str,
) -> Committed:
    """One commit of `upserts` and `deletes`, validated against the committed files."""
    if not upserts and not deletes:
        raise InvalidArgument("upserts", "a commit needs at least one upsert or delete")
    parsed: dict[str, MemoryFileData] = {}
    for i, (path, content) in enumerate(upserts):
        check_path(f"upserts[{i}].path", path)
        if path in parsed:
            raise InvalidArgument(f"upserts[{i}].path", f"'{path}' is given twice")
        parsed[path] = parse_file(f"upserts[{i}].content", path, content)
    for i, path in enumerate(deletes):
        check_path(f"deletes[{i}]", path)
        if path in parsed:
            raise InvalidArgument(f"deletes[{i}]", f"'{path}' is both written and deleted")
    now = deps.clock()
    with deps.store.transaction() as tx:
        agent = _memfs_agent(tx, principal, agent_id, "commit memory of")
        _check_expected(agent, expected_revision)
        current = deps.snapshots().get(agent_id, agent.memory_head).files
        for i, path in enumerate(deletes):
            if path not in current:
                raise NotFound(f"deletes[{i}]: '{path}' is not a committed memory file")
            check_change(f"deletes[{i}]", current[path], None)
        for i, (path, _) in enumerate(upserts):
            check_change(f"upserts[{i}].content", current.get(path), parsed[path])
        files = {path: file.content for path, file in current.items() if path not in deletes}
        files.update({path: file.content for path, file in parsed.items()})
        return commit_tree(deps, tx, agent, files, message, author or principal.subject, now)


def commit_tree(
    deps: Deps,
    tx: StateTx,
    agent: Agent,
    files: Mapping[str, str],
    message: str,
    author: str,
    now: float,
) -> Committed:
    """Commits `files` as the agent's whole memory inside `tx`, unless nothing changed."""
    snapshots = deps.snapshots()
    base = snapshots.get(agent.id, agent.memory_head)
    current = base.files
    changed = sorted(
        path
        for path in set(files) | set(current)
        if (current[path].content if path in current else None) != files.get(path)
    )
    if not changed:
        return Committed(agent.memory_head, [], False)
    text = message.strip() or f"Update {', '.join(changed)}"
    changes = {path: files.get(path) for path in changed}
    repo = snapshots.repos.open(agent.id)
    head = repo.write_changes(agent.memory_head, changes, text, author, now)
    snapshots.derive(
        agent.id,
        base,
        head,
        {p: None if t is None else parse_file(p, p, t) for p, t in changes.items()},
    )
    return move_head(deps, tx, agent, head, changed, now)


def revert(
    deps: Deps,
    principal: Principal,
    agent_id: str,
    revision: str,
    expected_revision: str,
    message: str,
    author: str,
) -> Committed:
    """A new commit whose files are those of `revision`."""
    now = deps.clock()
    with deps.store.transaction() as tx:
        agent = _memfs_agent(tx, principal, agent_id, "revert memory of")
        _check_expected(agent, expected_revision)
        target = str(deps.snapshots().repos.open(agent_id).commit(revision).id)
        old = deps.snapshots().get(agent_id, target).files
        return commit_tree(
            deps,
            tx,
            agent,
            {path: file.content for path, file in old.items()},
            message.strip() or f"Revert memory to {target}",
            author or principal.subject,
            now,
        )


def file_blocks(files: Mapping[str, MemoryFileData]) -> list[Block]:
    """The `system/` files seen as blocks, for the memory tools: the label is the path under
    system/ without `.md`, the value is the body."""
    return [
        Block(
            id=path,
            tenant="",
            label=path[len("system/") : -len(".md")],
            value=file.body,
            limit=file.limit or DEFAULT_BLOCK_LIMIT,
            description=file.description or "",
            read_only=file.is_read_only,
        )
        for path, file in sorted(files.items())
        if path.startswith("system/")
    ]


def _read_agent(deps: Deps, principal: Principal, agent_id: str) -> Agent:
    access.require_agent_access(principal, agent_id, "read memory of")
    agent = deps.store.reader().get_agent_row(principal.tenant, agent_id)
    if agent is None:
        raise agent_not_found(agent_id)
    return _require_memfs(agent)


def _resolve(deps: Deps, agent: Agent, revision: str) -> str:
    if not revision:
        return agent.memory_head
    return str(deps.snapshots().repos.open(agent.id).commit(revision).id)


def list_files(
    deps: Deps, principal: Principal, agent_id: str, revision: str
) -> tuple[str, list[MemoryFileData]]:
    """Every file of a revision, sorted by path."""
    agent = _read_agent(deps, principal, agent_id)
    resolved = _resolve(deps, agent, revision)
    files = deps.snapshots().get(agent_id, resolved).files
    return resolved, [files[path] for path in sorted(files)]


def get_file(
    deps: Deps, principal: Principal, agent_id: str, path: str, revision: str
) -> tuple[str, MemoryFileData]:
    """One file of a revision."""
    agent = _read_agent(deps, principal, agent_id)
    resolved = _resolve(deps, agent, revision)
    files: Mapping[str, MemoryFileData] = deps.snapshots().get(agent_id, resolved).files
    if path not in files:
        raise NotFound(f"memory file '{path}' not found at revision {resolved}")
    return resolved, files[path]


def history(
    deps: Deps,
    principal: Principal,
    agent_id: str,
    path: str,
    page_size: int,
    page_token: str,
) -> tuple[list[CommitInfo], str]:
    """Commits newest first (only those touching `path` when given), a page at a time.

    A token remembers the head its first page started from, so later commits never shift
    the pages of a listing in progress.
    """
    agent = _read_agent(deps, principal, agent_id)
    query = fingerprint("memory-history", agent_id, path)
    size, cursor = parse_cursor(page_size, page_token, query)
    head = str(cursor.get("head", agent.memory_head))
    skip = int(str(cursor.get("skip", 0)))
    found: list[CommitInfo] = []
    for i, commit in enumerate(deps.snapshots().repos.open(agent_id).history(head, path)):
        if i < skip:
            continue
        found.append(commit)
        if len(found) > size:
            break
    token = next_cursor(found, size, {"head": head, "skip": skip + size}, query)
    return found[:size], token
