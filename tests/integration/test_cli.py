"""The `cairn` command against running services: --json output parsed for each command."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cairn_server import cli
from tests.servers import ServerProcess, free_port, make_key


@pytest.fixture(scope="module")
def services(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[ServerProcess, ServerProcess]]:
    data_dir = tmp_path_factory.mktemp("cli")
    key = make_key(data_dir, "default")
    (data_dir / "admin.key").write_text(key + "\n")
    recall = ServerProcess("recall_service", data_dir, free_port(), [], {}).start()
    state = ServerProcess("state_service", data_dir, free_port(), [], {}).start()
    yield state, recall
    state.kill()
    recall.kill()


class Cairn:
    """Runs `cairn ...` in this process against the test's services."""

    def __init__(self, state: ServerProcess, recall: ServerProcess, capsys: Any) -> None:
        self.flags = [
            "--state-addr",
            state.address,
            "--recall-addr",
            recall.address,
            "--data-dir",
            str(state.data_dir),
        ]
        self.capsys = capsys

    def run(self, *argv: str, connect: bool = True) -> tuple[int, str, str]:
        self.capsys.readouterr()
        try:
            cli.main([*argv, *(self.flags if connect else [])])
            code = 0
        except SystemExit as exit_:
            code = int(exit_.code or 0)
        out = self.capsys.readouterr()
        return code, out.out, out.err

    def json(self, *argv: str) -> Any:
        code, out, err = self.run(*argv, "--json")
        assert code == 0, err
        return json.loads(out)


@pytest.fixture
def cairn(services: tuple[ServerProcess, ServerProcess], capsys: Any) -> Cairn:
    return Cairn(*services, capsys)


def test_readme_walkthrough_shares_one_block_between_two_agents(cairn: Cairn) -> None:
    code, human, _ = cairn.run(
        "block",
        "create",
        "--label",
        "human",
        "--value",
        "Name: Sam",
        "--description",
        "The user",
        "-q",
    )
    assert code == 0
    human = human.strip()
    code, one, _ = cairn.run(
        "agent",
        "create",
        "--name",
        "one",
        "--system",
        "You are One.",
        "--block",
        "persona=I am One.",
        "--block-id",
        human,
        "-q",
    )
    one = one.strip()
    two = cairn.json(
        "agent", "create", "--name", "two", "--system", "You are Two.", "--block-id", human
    )["id"]
    before = cairn.json("agent", "compile", one)
    assert "<value>\nName: Sam\n</value>" in before["system_prompt"]
    update = cairn.json("block", "set", human, "--value", "Name: Sam. Prefers tea.")
    assert update["rebuilt_agent_ids"] == [one, two]
    assert update["block"]["version"] == 2
    for agent_id in (one, two):
        after = cairn.json("agent", "compile", agent_id)
        assert "<value>\nName: Sam. Prefers tea.\n</value>" in after["system_prompt"]
        assert after["cache_hit"] is True


def test_block_and_agent_show_and_list(cairn: Cairn) -> None:
    block = cairn.json("block", "create", "--label", "notes", "--value", "x", "--tag", "cli-list")
    assert cairn.json("block", "show", block["id"])["value"] == "x"
    listed = cairn.json("block", "list", "--tag", "cli-list")
    assert [b["id"] for b in listed["blocks"]] == [block["id"]]
    agent = cairn.json(
        "agent", "create", "--name", "lister", "--tag", "cli-list", "--block-id", block["id"]
    )
    shown = cairn.json("agent", "show", agent["id"])
    assert (shown["name"], shown["memory_mode"], shown["blocks"][0]["label"]) == (
        "lister",
        "standard",
        "notes",
    )
    assert [a["id"] for a in cairn.json("agent", "list", "--tag", "cli-list")["agents"]] == [
        agent["id"]
    ]


def test_export_then_import_with_fresh_ids(cairn: Cairn, tmp_path: Path) -> None:
    agent = cairn.json("agent", "create", "--name", "exported", "--block", "human=Sam")
    path = tmp_path / "agents.json"
    written = cairn.json("agent", "export", agent["id"], "-o", str(path))
    assert written == {"agents": 1, "path": str(path)}
    assert json.loads(path.read_text())["format"] == "cairn.agent-file"
    imported = cairn.json("agent", "import", str(path))
    new_id = imported["id_map"][agent["id"]]
    assert [a["id"] for a in imported["agents"]] == [new_id]
    assert new_id != agent["id"]
    assert cairn.json("agent", "show", new_id)["blocks"][0]["value"] == "Sam"


def test_stream_write_read_and_verify_against_a_kept_checkpoint(
    cairn: Cairn, tmp_path: Path
) -> None:
    created = cairn.json("stream", "create", "--owner", "planner")
    stream = created["stream"]["id"]
    attached = cairn.json("stream", "attach", stream, "coder", "--role", "writer")
    assert attached["participant"]["role"] == "writer"
    for i in range(3):
        written = cairn.json(
            "stream", "write", stream, "--content", f"step {i}", "--as", "coder", "--tag", "plan"
        )
        assert written["record"]["content"] == f"step {i}"
    kept = tmp_path / "checkpoint.json"
    first = cairn.json("stream", "verify", stream, "--save-checkpoint", str(kept))
    assert (first["ok"], first["records"], first["checkpoint_size"]) == (True, 5, 5)
    cairn.json("stream", "write", stream, "--content", "later", "--as", "planner")
    later = cairn.json("stream", "verify", stream, "--checkpoint", str(kept))
    assert (later["ok"], later["records"], later["problems"]) == (True, 6, [])
    read = cairn.json("stream", "read", stream, "--from", "coder")
    assert [r["content"] for r in read["records"]] == ["step 0", "step 1", "step 2"]
    events = cairn.json("stream", "read", stream, "--events", "--limit", "2")
    assert [r["kind"] for r in events["records"]] == ["attach", "attach"]


def test_stream_write_keeps_when_a_message_was_said(cairn: Cairn) -> None:
    stream = cairn.json("stream", "create", "--owner", "planner")["stream"]["id"]
    written = cairn.json(
        "stream",
        "write",
        stream,
        "--content",
        "Met at the lake.",
        "--as",
        "planner",
        "--occurred-at",
        "2023-05-08T13:56:00Z",
    )
    assert written["record"]["occurred_at"] == "2023-05-08T13:56:00+00:00"
    code, out, err = cairn.run("stream", "read", stream)
    assert (code, out.splitlines()) == (0, ["#2 2023-05-08 13:56:00 planner: Met at the lake."])
    code, _, err = cairn.run(
        "stream",
        "write",
        stream,
        "--content",
        "x",
        "--as",
        "planner",
        "--occurred-at",
        "2023-05-08T13:56:00",
    )
    assert code == 2
    assert err.splitlines()[-1].endswith(
        "argument --occurred-at: '2023-05-08T13:56:00' has no time zone: add one (Z for UTC, "
        "or +01:00 and the like)"
    )
    assert len(cairn.json("stream", "read", stream)["records"]) == 1


def test_keys_create_list_and_revoke(
    cairn: Cairn, services: tuple[ServerProcess, ServerProcess]
) -> None:
    data = ["--data-dir", str(services[0].data_dir)]
    code, out, err = cairn.run(
        "keys",
        "create",
        "--tenant",
        "zeta",
        "--role",
        "agent",
        "--subject",
        "agent-1",
        "--json",
        *data,
        connect=False,
    )
    created = json.loads(out)
    assert (created["tenant"], created["role"], created["subject"]) == ("zeta", "agent", "agent-1")
    assert created["key"].startswith(f"ck_{created['key_id']}_")
    code, out, _ = cairn.run("keys", "list", "--tenant", "zeta", "--json", *data, connect=False)
    assert [(k["key_id"], k["revoked"]) for k in json.loads(out)["keys"]] == [
        (created["key_id"], False)
    ]
    code, out, _ = cairn.run("keys", "revoke", created["key_id"], "--json", *data, connect=False)
    assert json.loads(out) == {"revoked": created["key_id"]}
    code, out, _ = cairn.run("keys", "list", "--tenant", "zeta", "--json", *data, connect=False)
    assert json.loads(out)["keys"][0]["revoked"] is True
    code, _, err = cairn.run("keys", "revoke", created["key_id"], *data, connect=False)
    assert (code, err) == (2, f"cairn: no active API key with id '{created['key_id']}'\n")


def test_errors_are_one_line_and_a_nonzero_exit(cairn: Cairn) -> None:
    code, out, err = cairn.run("agent", "show", "agent-missing")
    assert (code, out, err) == (1, "", "cairn: NOT_FOUND: agent 'agent-missing' not found\n")
    code, _, err = cairn.run("block", "set", "block-x")
    assert (code, err) == (
        2,
        "cairn: nothing to set; pass --value, --description, --limit or --label\n",
    )


def test_unreachable_service_says_what_to_do(capsys: Any, tmp_path: Path) -> None:
    port = free_port()
    with pytest.raises(SystemExit) as exit_:
        cli.main(
            [
                "agent",
                "list",
                "--state-addr",
                f"127.0.0.1:{port}",
                "--api-key",
                "ck_x_y",
                "--timeout",
                "2",
            ]
        )
    assert exit_.value.code == 1
    assert capsys.readouterr().err == (
        f"cairn: cannot reach Cairn at 127.0.0.1:{port} / 127.0.0.1:50052; is `cairn up` running?\n"
    )


def test_demo_tells_the_story_end_to_end(cairn: Cairn) -> None:
    result = cairn.json("demo")
    agents = result["agents"]
    assert result["ok"] is True
    assert result["prompt_before"] == "Launch: Friday 12 December, at the Old Mill."
    assert result["prompt_after"] == "Launch: Monday 15 December, at the Old Mill."
    assert result["rebuilt_agent_ids"] == sorted([agents["planner"], agents["writer"]])
    assert [(r["seq"], r["source_agent_id"]) for r in result["records"]] == [
        (3, agents["planner"]),
        (4, agents["writer"]),
        (5, agents["planner"]),
    ]
    assert result["search"]["hits"][0]["seq"] == 3
    assert result["verified"] == {"records": 5, "latest_size": 5, "kept_size": 3}
    shown = cairn.json("stream", "read", result["stream_id"])
    assert [r["content"] for r in shown["records"]] == [
        "The Old Mill is flooded, so the launch moves to Monday the 15th.",
        "Understood. I will rewrite the press release for Monday and resend it.",
        "Also book the caterers for Monday; Friday's order can be cancelled.",
    ]


def test_demo_narrates_each_step(cairn: Cairn) -> None:
    code, out, err = cairn.run("demo")
    assert (code, err) == (0, "")
    steps = [line.split(".")[0] for line in out.splitlines() if line[:1].isdigit()]
    assert steps == ["1", "2", "3", "4", "5", "6", "7"]
    assert "The writer's next prompt shows: Launch: Monday 15 December, at the Old Mill." in out
    assert out.splitlines()[-1] == "Done: that is Cairn."
