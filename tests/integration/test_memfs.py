"""MemFS over real gRPC: committed files compile, nothing else does."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pygit2
import pytest

from cairn.v1 import common_pb2, state_pb2
from tests.clients import block, rpc_error, state_client
from tests.servers import ServerProcess, free_port, make_key

HUMAN = "---\ndescription: The user\n---\nName: Sam\n"
PERSONA = "---\ndescription: Who I am\nread_only: true\n---\nI am careful.\n"


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory, state_backend: list[str]
) -> Iterator[ServerProcess]:
    proc = ServerProcess(
        "state_service", tmp_path_factory.mktemp("memfs"), free_port(), state_backend, {}
    )
    yield proc.start()
    proc.kill()


@pytest.fixture(scope="module")
def admin(server: ServerProcess) -> Iterator[Any]:
    with grpc.insecure_channel(server.address) as channel:
        yield state_client(channel, make_key(server, "acme"))


def new_agent(client: Any, **kw: Any) -> state_pb2.Agent:
    kw.setdefault("name", "memfs")
    kw.setdefault("system", "You remember.\n{CORE_MEMORY}")
    kw.setdefault("memory_blocks", [block("human", "Name: Sam\n", description="The user")])
    agent: state_pb2.Agent = client.CreateAgent(
        state_pb2.CreateAgentRequest(memory_mode=state_pb2.MEMORY_MODE_MEMFS, **kw)
    ).agent
    return agent


def commit(client: Any, agent_id: str, upserts: dict[str, str] | None = None, **kw: Any) -> Any:
    return client.CommitMemoryFiles(
        state_pb2.CommitMemoryFilesRequest(
            agent_id=agent_id,
            upserts=[
                state_pb2.MemoryFileWrite(path=p, content=c) for p, c in (upserts or {}).items()
            ],
            **kw,
        )
    )


def compile_(client: Any, agent_id: str) -> state_pb2.CompileContextResponse:
    reply: state_pb2.CompileContextResponse = client.CompileContext(
        state_pb2.CompileContextRequest(agent_id=agent_id)
    )
    return reply


def test_blocks_given_at_creation_become_system_files_in_the_first_commit(admin: Any) -> None:
    agent = new_agent(
        admin,
        memory_blocks=[
            block("human", "Name: Sam\n", description="The user"),
            block("persona", "I help.", description="Me", read_only=True, limit=500),
        ],
    )
    assert len(agent.memory_revision) == 40
    assert list(agent.blocks) == []
    files = admin.ListMemoryFiles(state_pb2.ListMemoryFilesRequest(agent_id=agent.id))
    assert files.revision == agent.memory_revision
    assert [(f.path, f.content) for f in files.files] == [
        ("system/human.md", "---\ndescription: The user\n---\nName: Sam\n"),
        ("system/persona.md", "---\ndescription: Me\nread_only: true\nlimit: 500\n---\nI help."),
    ]
    history = admin.MemoryHistory(state_pb2.MemoryHistoryRequest(agent_id=agent.id))
    assert [c.revision for c in history.commits] == [agent.memory_revision]
    assert list(history.commits[0].changed_paths) == ["system/human.md", "system/persona.md"]


def test_committed_persona_compiles(admin: Any) -> None:
    agent = new_agent(admin, memory_blocks=[])
    reply = commit(admin, agent.id, {"system/persona.md": PERSONA}, message="Who I am")
    assert list(reply.changed_paths) == ["system/persona.md"]
    assert reply.prompt_rebuilt is True
    context = compile_(admin, agent.id)
    assert context.memory_revision == reply.revision
    assert context.cache_hit is True
    assert context.system_prompt == (
        "You remember.\n"
        "<self>\n<projection>$MEMORY_DIR/system/persona.md</projection>\n"
        "<description>Who I am</description>\nI am careful.\n</self>\n\n"
        "<memory_metadata>\n"
        f"- AGENT_ID: {agent.id}\n"
        "- 0 previous messages between you and the user are stored in recall memory (use tools "
        "to access them)\n"
        "- 0 total memories you created are stored in archival memory (use tools to access "
        "them)\n"
        "</memory_metadata>"
    )


def test_text_written_to_the_working_tree_but_not_committed_does_not_compile(
    admin: Any, server: ServerProcess
) -> None:
    agent = new_agent(admin)
    before = compile_(admin, agent.id)
    worktree = server.data_dir / "memfs" / agent.id
    (worktree / "system").mkdir(exist_ok=True)
    (worktree / "system" / "human.md").write_text("---\ndescription: The user\n---\nDRAFT\n")
    (worktree / "system" / "draft.md").write_text("---\ndescription: draft\n---\nDRAFT\n")
    repo = pygit2.Repository(str(worktree))
    repo.index.add_all()
    repo.index.write()
    after = compile_(admin, agent.id)
    assert after.system_prompt == before.system_prompt
    assert "DRAFT" not in compile_(admin, agent.id).system_prompt
    assert "DRAFT" not in compile_(admin, agent.id).compiled_memory


def test_a_commit_changes_the_next_compile_context(admin: Any) -> None:
    agent = new_agent(admin)
    before = compile_(admin, agent.id)
    assert "Name: Sam" in before.system_prompt
    reply = commit(
        admin,
        agent.id,
        {"system/human.md": "---\ndescription: The user\n---\nName: Sam\nLikes tea\n"},
        expected_revision=before.memory_revision,
    )
    after = compile_(admin, agent.id)
    assert after.memory_revision == reply.revision != before.memory_revision
    assert "Name: Sam\nLikes tea\n</human>" in after.system_prompt
    same = commit(
        admin,
        agent.id,
        {"system/human.md": "---\ndescription: The user\n---\nName: Sam\nLikes tea\n"},
    )
    assert (same.revision, list(same.changed_paths)) == (reply.revision, [])


def test_message_mode_keeps_the_system_prompt_and_sends_the_update_once(admin: Any) -> None:
    agent = new_agent(admin, memory_update_mode=state_pb2.MEMORY_UPDATE_MODE_MESSAGE)
    first = compile_(admin, agent.id)
    reply = commit(
        admin, agent.id, {"system/human.md": "---\ndescription: The user\n---\nName: Ann\n"}
    )
    assert reply.prompt_rebuilt is False
    pending = compile_(admin, agent.id)
    assert pending.system_prompt == first.system_prompt
    assert pending.memory_revision == reply.revision
    assert pending.memory_update.startswith(f'<memory_update revision="{reply.revision}">\n')
    assert "Name: Ann" in pending.memory_update
    admin.CommitStep(
        state_pb2.CommitStepRequest(
            agent_id=agent.id,
            step_id="s1",
            base_context_version=pending.context_version,
            messages=[
                common_pb2.Message(
                    role=common_pb2.MESSAGE_ROLE_SYSTEM, content=pending.memory_update
                ),
                common_pb2.Message(role=common_pb2.MESSAGE_ROLE_USER, content="hi"),
            ],
            acknowledged_memory_revision=reply.revision,
        )
    )
    after = compile_(admin, agent.id)
    assert after.memory_update == ""
    assert after.system_prompt == first.system_prompt
    assert after.messages[0].content == pending.memory_update


def test_concurrent_commits_with_the_same_expected_revision_exactly_one_wins(admin: Any) -> None:
    agent = new_agent(admin)
    base = agent.memory_revision
    results: list[str] = []
    lock = threading.Lock()

    def attempt(i: int) -> None:
        try:
            reply = commit(
                admin,
                agent.id,
                {"system/human.md": f"---\ndescription: The user\n---\nwriter {i}\n"},
                expected_revision=base,
            )
            outcome = f"ok {reply.revision}"
        except grpc.RpcError as error:
            outcome = error.code().name
        with lock:
            results.append(outcome)

    threads = [threading.Thread(target=attempt, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    winners = [r for r in results if r.startswith("ok")]
    assert len(winners) == 1
    assert sorted(r for r in results if not r.startswith("ok")) == ["ABORTED"] * 7
    assert compile_(admin, agent.id).memory_revision == winners[0].split()[1]
    history = admin.MemoryHistory(state_pb2.MemoryHistoryRequest(agent_id=agent.id))
    assert len(history.commits) == 2


REFUSALS = [
    (
        {"notes.md": "no frontmatter"},
        "upserts[0].content: 'notes.md' has no frontmatter: start the file with a '---' line",
    ),
    (
        {"notes.md": "---\ndescription: [x\n---\n"},
        "upserts[0].content: 'notes.md': the frontmatter is not YAML (expected ',' or ']', but got '<stream end>')",
    ),
    (
        {"system/x.md": "---\nlimit: 9\n---\nx"},
        "upserts[0].content: 'system/x.md': files under system/ and reference/ need a description",
    ),
    (
        {"reference/r.md": "---\n---\nx"},
        "upserts[0].content: 'reference/r.md': files under system/ and reference/ need a description",
    ),
    (
        {"notes.md": "---\ntitle: t\n---\n"},
        "upserts[0].content: 'notes.md': frontmatter key 'title' is not allowed; use description, read_only and limit",
    ),
    (
        {"system/persona.md": "---\ndescription: Who I am\nread_only: true\n---\nchanged\n"},
        "upserts[0].content: 'system/persona.md' is read-only and cannot be changed",
    ),
    (
        {"system/human.md": "---\ndescription: The user\nread_only: false\n---\nName: Sam\n"},
        "upserts[0].content: 'system/human.md': read_only cannot be added to a committed file",
    ),
    (
        {"notes.md": "---\nlimit: 2\n---\nabc"},
        "upserts[0].content: 'notes.md': the body is 3 characters, longer than its limit of 2 (by 1)",
    ),
    (
        {"skills/search.md": "---\n---\n"},
        "upserts[0].path: 'skills/search.md': files under skills/ must be skills/<name>/SKILL.md",
    ),
    (
        {"../escape.md": "---\n---\n"},
        "upserts[0].path: '../escape.md' escapes the memory repository",
    ),
    (
        {"/abs.md": "---\n---\n"},
        "upserts[0].path: '/abs.md' is absolute; memory paths are relative",
    ),
    ({"notes.txt": "---\n---\n"}, "upserts[0].path: 'notes.txt' is not a Markdown file (.md)"),
]


@pytest.mark.parametrize(("upserts", "message"), REFUSALS)
def test_each_validation_refusal_commits_nothing(
    admin: Any, upserts: dict[str, str], message: str
) -> None:
    agent = new_agent(
        admin,
        memory_blocks=[
            block("human", "Name: Sam\n", description="The user"),
            block("persona", "I am careful.\n", description="Who I am", read_only=True),
        ],
    )
    before = compile_(admin, agent.id)
    error = rpc_error(commit, admin, agent.id, upserts)
    assert error.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert error.details() == message
    assert compile_(admin, agent.id).memory_revision == before.memory_revision
    history = admin.MemoryHistory(state_pb2.MemoryHistoryRequest(agent_id=agent.id))
    assert len(history.commits) == 1


def test_read_only_file_cannot_be_deleted(admin: Any) -> None:
    agent = new_agent(
        admin, memory_blocks=[block("persona", "x", description="Me", read_only=True)]
    )
    error = rpc_error(
        admin.CommitMemoryFiles,
        state_pb2.CommitMemoryFilesRequest(agent_id=agent.id, deletes=["system/persona.md"]),
    )
    assert error.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert error.details() == "deletes[0]: 'system/persona.md' is read-only and cannot be deleted"


def test_stale_expected_revision_is_aborted(admin: Any) -> None:
    agent = new_agent(admin)
    first = agent.memory_revision
    second = commit(admin, agent.id, {"notes.md": "---\n---\none"}).revision
    error = rpc_error(
        commit, admin, agent.id, {"notes.md": "---\n---\ntwo"}, expected_revision=first
    )
    assert error.code() is grpc.StatusCode.ABORTED
    assert error.details() == (
        f"agent '{agent.id}' memory is at revision {second}, not the expected {first}; read it "
        "again and retry"
    )


def test_revert_restores_the_older_prompt_byte_for_byte(admin: Any) -> None:
    agent = new_agent(admin)
    original = compile_(admin, agent.id)
    commit(admin, agent.id, {"system/human.md": "---\ndescription: The user\n---\nName: Bob\n"})
    commit(admin, agent.id, {"notes/todo.md": "---\n---\nbuy milk"})
    changed = compile_(admin, agent.id)
    assert changed.system_prompt != original.system_prompt
    reverted = admin.RevertMemory(
        state_pb2.RevertMemoryRequest(agent_id=agent.id, revision=original.memory_revision)
    )
    assert sorted(reverted.changed_paths) == ["notes/todo.md", "system/human.md"]
    after = compile_(admin, agent.id)
    assert after.memory_revision == reverted.revision != original.memory_revision
    assert after.system_prompt == original.system_prompt
    assert after.compiled_memory == original.compiled_memory


def test_files_and_history_at_older_revisions(admin: Any) -> None:
    agent = new_agent(admin)
    first = agent.memory_revision
    second = commit(admin, agent.id, {"notes/a.md": "---\n---\na"}, message="add a").revision
    third = commit(
        admin, agent.id, {"notes/b.md": "---\n---\nb"}, author="Ann <ann@x.org>"
    ).revision
    old = admin.GetMemoryFile(
        state_pb2.GetMemoryFileRequest(agent_id=agent.id, path="system/human.md", revision=first)
    )
    assert (old.revision, old.file.body, old.file.description) == (first, "Name: Sam\n", "The user")
    missing = rpc_error(
        admin.GetMemoryFile,
        state_pb2.GetMemoryFileRequest(agent_id=agent.id, path="notes/a.md", revision=first),
    )
    assert missing.code() is grpc.StatusCode.NOT_FOUND
    assert missing.details() == f"memory file 'notes/a.md' not found at revision {first}"
    page1 = admin.MemoryHistory(state_pb2.MemoryHistoryRequest(agent_id=agent.id, page_size=2))
    assert [c.revision for c in page1.commits] == [third, second]
    assert page1.commits[0].author == "Ann <ann@x.org>"
    assert page1.commits[1].message == "add a"
    page2 = admin.MemoryHistory(
        state_pb2.MemoryHistoryRequest(
            agent_id=agent.id, page_size=2, page_token=page1.next_page_token
        )
    )
    assert [c.revision for c in page2.commits] == [first]
    assert page2.next_page_token == ""
    only_a = admin.MemoryHistory(
        state_pb2.MemoryHistoryRequest(agent_id=agent.id, path="notes/a.md")
    )
    assert [c.revision for c in only_a.commits] == [second]
    unknown = rpc_error(
        admin.ListMemoryFiles,
        state_pb2.ListMemoryFilesRequest(agent_id=agent.id, revision="f" * 40),
    )
    assert unknown.code() is grpc.StatusCode.NOT_FOUND


def test_available_skills_are_listed_per_request_and_never_stored(admin: Any) -> None:
    agent = new_agent(admin)
    commit(
        admin,
        agent.id,
        {"skills/search/SKILL.md": "---\ndescription: Search the web\n---\nSteps..."},
    )
    context = compile_(admin, agent.id)
    assert context.available_skills == (
        "<available_skills>\n- search: Search the web\n</available_skills>"
    )
    assert "search" not in context.system_prompt
    assert "Steps..." not in context.system_prompt


def test_memory_tools_edit_files_and_commit_as_the_agent(admin: Any) -> None:
    agent = new_agent(admin)
    reply = admin.ExecuteMemoryTool(
        state_pb2.ExecuteMemoryToolRequest(
            agent_id=agent.id,
            tool_name="core_memory_append",
            arguments_json=json.dumps(
                {"label": "human", "content": "Likes tea", "reason": "The user said so"}
            ),
        )
    )
    assert reply.ok is True
    assert reply.memory_revision != agent.memory_revision
    assert list(reply.rebuilt_agent_ids) == [agent.id]
    file = admin.GetMemoryFile(
        state_pb2.GetMemoryFileRequest(agent_id=agent.id, path="system/human.md")
    ).file
    assert file.content == "---\ndescription: The user\n---\nName: Sam\n\nLikes tea"
    latest = admin.MemoryHistory(state_pb2.MemoryHistoryRequest(agent_id=agent.id)).commits[0]
    assert (latest.message, latest.author) == (
        "The user said so",
        f"{agent.id} <{agent.id}@cairn.local>",
    )
    assert "Likes tea" in compile_(admin, agent.id).system_prompt
    refused = admin.ExecuteMemoryTool(
        state_pb2.ExecuteMemoryToolRequest(
            agent_id=agent.id,
            tool_name="memory_rethink",
            arguments_json='{"label": "project", "new_memory": "x"}',
        )
    )
    assert (refused.ok, refused.result) == (
        False,
        "Error: there is no memory block labelled `project`; nothing was changed. Existing "
        "labels: human.",
    )


def test_memfs_rpcs_on_a_block_agent_fail_the_precondition(admin: Any) -> None:
    agent = admin.CreateAgent(state_pb2.CreateAgentRequest(name="blocks")).agent
    error = rpc_error(admin.ListMemoryFiles, state_pb2.ListMemoryFilesRequest(agent_id=agent.id))
    assert error.code() is grpc.StatusCode.FAILED_PRECONDITION
    memfs = new_agent(admin)
    human = admin.CreateBlock(state_pb2.CreateBlockRequest(block=block("x"))).block
    attach = rpc_error(
        admin.AttachBlock, state_pb2.AttachBlockRequest(agent_id=memfs.id, block_id=human.id)
    )
    assert attach.code() is grpc.StatusCode.FAILED_PRECONDITION


def test_export_import_keeps_commit_ids(admin: Any, server_factory: Any) -> None:
    agent = new_agent(admin)
    commit(admin, agent.id, {"notes/a.md": "---\n---\na"})
    head = commit(admin, agent.id, {"system/persona.md": PERSONA}).revision
    exported = admin.ExportAgent(state_pb2.ExportAgentRequest(agent_ids=[agent.id]))
    history = [
        c.revision
        for c in admin.MemoryHistory(state_pb2.MemoryHistoryRequest(agent_id=agent.id)).commits
    ]
    fresh = server_factory()
    with grpc.insecure_channel(fresh.address) as channel:
        other = state_client(channel, make_key(fresh, "acme"))
        imported = other.ImportAgent(
            state_pb2.ImportAgentRequest(agent_file_json=exported.agent_file_json)
        ).agents[0]
        assert imported.memory_revision == head
        copied = [
            c.revision
            for c in other.MemoryHistory(
                state_pb2.MemoryHistoryRequest(agent_id=imported.id)
            ).commits
        ]
        assert copied == history
        assert (
            compile_(other, imported.id).compiled_memory
            == compile_(admin, agent.id).compiled_memory
        )
        follow = commit(other, imported.id, {"notes/b.md": "---\n---\nb"}, expected_revision=head)
        assert follow.revision != head
    assert Path(fresh.data_dir / "memfs" / imported.id / ".git").is_dir()
