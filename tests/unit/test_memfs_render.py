"""MEMFS rendering and file rules, with literal strings."""

from __future__ import annotations

import pytest

from cairn_server.errors import InvalidArgument
from state_service.memfs.files import (
    MemoryFileData,
    check_change,
    check_path,
    parse_file,
    render_file,
    with_body,
)
from state_service.memfs.render import available_skills, render_memfs


def file(path: str, body: str, description: str | None = "d", **kw: object) -> MemoryFileData:
    content = render_file(description or "", body)
    return MemoryFileData(path, content, description, kw.get("read_only"), kw.get("limit"), body)  # type: ignore[arg-type]


def render(*files: MemoryFileData) -> str:
    return "".join(render_memfs({f.path: f for f in files}))


def test_persona_renders_as_self() -> None:
    assert render(file("system/persona.md", "I am careful.\n", "Who I am")) == (
        "<self>\n<projection>$MEMORY_DIR/system/persona.md</projection>\n"
        "<description>Who I am</description>\nI am careful.\n</self>"
    )


def test_system_files_render_as_nested_alphabetical_tags() -> None:
    assert render(
        file("system/project/tooling.md", "uv", "Tools"),
        file("system/human.md", "Name: Sam", "The user"),
        file("system/project/architecture.md", "gRPC", "Design"),
    ) == (
        "<memory>\n"
        "<human>\n<projection>$MEMORY_DIR/system/human.md</projection>\n"
        "<description>The user</description>\nName: Sam\n</human>\n"
        "<project>\n"
        "<architecture>\n<projection>$MEMORY_DIR/system/project/architecture.md</projection>\n"
        "<description>Design</description>\ngRPC\n</architecture>\n"
        "<tooling>\n<projection>$MEMORY_DIR/system/project/tooling.md</projection>\n"
        "<description>Tools</description>\nuv\n</tooling>\n"
        "</project>\n"
        "</memory>"
    )


def test_file_beside_a_directory_of_the_same_name_shares_its_tag() -> None:
    assert render(
        file("system/project/a/deep.md", "deep", "Deep"),
        file("system/project.md", "index", "Index"),
    ) == (
        "<memory>\n<project>\n<projection>$MEMORY_DIR/system/project.md</projection>\n"
        "<description>Index</description>\nindex\n"
        "<a>\n<deep>\n<projection>$MEMORY_DIR/system/project/a/deep.md</projection>\n"
        "<description>Deep</description>\ndeep\n</deep>\n</a>\n"
        "</project>\n</memory>"
    )


def test_files_outside_system_are_a_tree_of_names() -> None:
    assert render(
        file("reference/api.md", "secret body", "API"),
        file("notes/ideas.md", "x"),
        file("notes/2026/jan.md", "x"),
        file("todo.md", "x"),
    ) == (
        "<external_projection>\n$MEMORY_DIR/\n"
        "├── notes/\n│   ├── 2026/\n│   │   └── jan.md\n│   └── ideas.md\n"
        "├── reference/\n│   └── api.md\n"
        "└── todo.md\n"
        "</external_projection>"
    )


def test_sections_are_separated_by_a_blank_line_and_skills_are_left_out() -> None:
    rendered = render(
        file("system/persona.md", "me", None),
        file("system/human.md", "you", "User"),
        file("notes.md", "n"),
        file("skills/search/SKILL.md", "how to search", "Search the web"),
    )
    assert rendered == (
        "<self>\n<projection>$MEMORY_DIR/system/persona.md</projection>\nme\n</self>\n\n"
        "<memory>\n<human>\n<projection>$MEMORY_DIR/system/human.md</projection>\n"
        "<description>User</description>\nyou\n</human>\n</memory>\n\n"
        "<external_projection>\n$MEMORY_DIR/\n└── notes.md\n</external_projection>"
    )


def test_empty_memory_renders_nothing() -> None:
    assert render_memfs({}) == []


def test_available_skills_list_names_and_first_description_lines() -> None:
    files = {
        f.path: f
        for f in (
            file("skills/search/SKILL.md", "body", "Search the web\nMore detail"),
            file("skills/deploy/SKILL.md", "body", None),
            file("system/human.md", "x"),
        )
    }
    assert available_skills(files) == (
        "<available_skills>\n- deploy\n- search: Search the web\n</available_skills>"
    )
    assert available_skills({}) == ""


def test_frontmatter_round_trip() -> None:
    text = render_file("The user: name, likes", "Name: Sam\n", read_only=True, limit=100)
    assert text == (
        "---\ndescription: 'The user: name, likes'\nread_only: true\nlimit: 100\n---\nName: Sam\n"
    )
    parsed = parse_file("f", "system/human.md", text)
    assert (parsed.description, parsed.read_only, parsed.limit, parsed.body) == (
        "The user: name, likes",
        True,
        100,
        "Name: Sam\n",
    )
    assert with_body(parsed, "Name: Ann\n") == text.replace("Sam", "Ann")


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("", "a memory file path must not be empty"),
        ("/etc/passwd.md", "'/etc/passwd.md' is absolute; memory paths are relative"),
        ("../outside.md", "'../outside.md' escapes the memory repository"),
        ("system/../../x.md", "'system/../../x.md' escapes the memory repository"),
        ("system/human.txt", "'system/human.txt' is not a Markdown file (.md)"),
        (
            "skills/search.md",
            "'skills/search.md': files under skills/ must be skills/<name>/SKILL.md",
        ),
        (
            "skills/search/README.md",
            "'skills/search/README.md': files under skills/ must be skills/<name>/SKILL.md",
        ),
        (
            "system/1st.md",
            "'system/1st.md': under system/ each name becomes a tag, and '1st' is not tag-safe "
            "(letters, digits, _ and -, starting with a letter or _)",
        ),
        (
            "notes/.hidden.md",
            "'notes/.hidden.md' has the segment '.hidden.md'; use letters, digits, _, - and . "
            "and do not start with . or -",
        ),
    ],
)
def test_bad_paths_are_refused(path: str, message: str) -> None:
    with pytest.raises(InvalidArgument) as caught:
        check_path("upserts[0].path", path)
    assert caught.value.message == f"upserts[0].path: {message}"


@pytest.mark.parametrize(
    ("path", "content", "message"),
    [
        (
            "notes.md",
            "no frontmatter",
            "'notes.md' has no frontmatter: start the file with a '---' line",
        ),
        (
            "notes.md",
            "---\ndescription: x\n",
            "'notes.md': the frontmatter is not closed by a '---' line",
        ),
        (
            "notes.md",
            "---\ndescription: [x\n---\n",
            "'notes.md': the frontmatter is not YAML (expected ',' or ']', but got '<stream end>')",
        ),
        ("notes.md", "---\n- a\n---\n", "'notes.md': the frontmatter must be a YAML mapping"),
        (
            "system/h.md",
            "---\nlimit: 5\n---\nbody",
            "'system/h.md': files under system/ and reference/ need a description",
        ),
        (
            "reference/r.md",
            "---\n---\nbody",
            "'reference/r.md': files under system/ and reference/ need a description",
        ),
        (
            "notes.md",
            "---\ntitle: x\n---\n",
            "'notes.md': frontmatter key 'title' is not allowed; use description, read_only and limit",
        ),
        (
            "notes.md",
            "---\nlimit: 3\n---\nfour",
            "'notes.md': the body is 4 characters, longer than its limit of 3 (by 1)",
        ),
        ("notes.md", "---\nlimit: -1\n---\n", "'notes.md': limit must be a positive whole number"),
        (
            "notes.md",
            "---\nread_only: yes please\n---\n",
            "'notes.md': read_only must be true or false",
        ),
    ],
)
def test_bad_files_are_refused(path: str, content: str, message: str) -> None:
    with pytest.raises(InvalidArgument) as caught:
        parse_file("upserts[0].content", path, content)
    assert caught.value.message == f"upserts[0].content: {message}"


def test_read_only_files_and_the_read_only_key_are_protected() -> None:
    locked = parse_file("f", "system/p.md", "---\ndescription: d\nread_only: true\n---\nx")
    changed = parse_file("f", "system/p.md", "---\ndescription: d\nread_only: true\n---\ny")
    with pytest.raises(InvalidArgument) as caught:
        check_change("f", locked, changed)
    assert caught.value.message == "f: 'system/p.md' is read-only and cannot be changed"
    with pytest.raises(InvalidArgument) as caught:
        check_change("f", locked, None)
    assert caught.value.message == "f: 'system/p.md' is read-only and cannot be deleted"
    check_change("f", locked, locked)
    plain = parse_file("f", "system/q.md", "---\ndescription: d\n---\nx")
    marked = parse_file("f", "system/q.md", "---\ndescription: d\nread_only: false\n---\nx")
    with pytest.raises(InvalidArgument) as caught:
        check_change("f", plain, marked)
    assert caught.value.message == "f: 'system/q.md': read_only cannot be added to a committed file"
    with pytest.raises(InvalidArgument) as caught:
        check_change("f", marked, plain)
    assert caught.value.message == (
        "f: 'system/q.md': read_only cannot be removed from a committed file"
    )
