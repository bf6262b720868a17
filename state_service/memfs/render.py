"""Rendering a MEMFS agent's committed files into its prompt (DESIGN.md §3.2). Pure.

- `system/persona.md` renders as `<self>`;
- every other `system/**` file renders as nested tags under `<memory>`, one tag per path
  segment, alphabetical, each with its `<projection>` path, its description and its body;
  a file and a directory of the same name share one tag (the file first, then the children);
- files outside `system/` and `skills/` are listed, names only, as a tree in
  `<external_projection>`;
- `skills/<name>/SKILL.md` never enter the stored prompt: `available_skills` lists them per
  request.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from state_service.memfs.files import MemoryFileData

MEMORY_DIR = "$MEMORY_DIR"
PERSONA = "system/persona.md"


@dataclass
class _Node:
    file: MemoryFileData | None = None
    children: dict[str, _Node] = field(default_factory=dict)


def _file_lines(file: MemoryFileData) -> list[str]:
    lines = [f"<projection>{MEMORY_DIR}/{file.path}</projection>"]
    if file.description:
        lines.append(f"<description>{file.description}</description>")
    body = file.body[:-1] if file.body.endswith("\n") else file.body
    if body:
        lines.append(body)
    return lines


def _render_node(name: str, node: _Node) -> list[list[str]]:
    """The node as chunks of lines: the opening tag with the node's own file, each child's
    chunks, then the closing tag. A file's chunk reads the same in every commit that does not
    change it, so its token count is cached."""
    head = [f"<{name}>"]
    if node.file is not None:
        head += _file_lines(node.file)
    chunks = [head]
    for child in sorted(node.children):
        chunks += _render_node(child, node.children[child])
    chunks.append([f"</{name}>"])
    return chunks


def _pieces(chunks: list[list[str]]) -> list[str]:
    """Chunks as text pieces split after a newline; together they are the lines joined."""
    pieces = ["\n".join(chunk) + "\n" for chunk in chunks]
    pieces[-1] = pieces[-1][:-1]
    return pieces


def _system_tree(files: Mapping[str, MemoryFileData]) -> _Node:
    root = _Node()
    for path, file in files.items():
        if not path.startswith("system/") or path == PERSONA:
            continue
        node = root
        segments = path[len("system/") :].split("/")
        for segment in segments[:-1]:
            node = node.children.setdefault(segment, _Node())
        leaf = node.children.setdefault(segments[-1][:-3], _Node())
        leaf.file = file
    return root


def _tree_lines(paths: list[str]) -> list[str]:
    tree: dict[str, dict] = {}  # type: ignore[type-arg]
    for path in paths:
        node = tree
        for segment in path.split("/"):
            node = node.setdefault(segment, {})
    lines = [f"{MEMORY_DIR}/"]

    def walk(node: dict, prefix: str) -> None:  # type: ignore[type-arg]
        names = sorted(node)
        for i, name in enumerate(names):
            last = i == len(names) - 1
            children = node[name]
            label = f"{name}/" if children else name
            lines.append(f"{prefix}{'└── ' if last else '├── '}{label}")
            if children:
                walk(children, prefix + ("    " if last else "│   "))

    walk(tree, "")
    return lines


def render_memfs(files: Mapping[str, MemoryFileData]) -> list[str]:
    """The compiled memory of a MEMFS agent, as pieces: sections, their separators, and
    within `<memory>` one piece per file."""
    sections: list[list[str]] = []
    persona = files.get(PERSONA)
    if persona is not None:
        sections.append(["\n".join(["<self>", *_file_lines(persona), "</self>"])])
    tree = _system_tree(files)
    if tree.children:
        chunks = [["<memory>"]]
        for name in sorted(tree.children):
            chunks += _render_node(name, tree.children[name])
        chunks.append(["</memory>"])
        sections.append(_pieces(chunks))
    external = sorted(path for path in files if not path.startswith(("system/", "skills/")))
    if external:
        lines = ["<external_projection>", *_tree_lines(external), "</external_projection>"]
        sections.append(["\n".join(lines)])
    parts: list[str] = []
    for i, section in enumerate(sections):
        if i:
            parts.append("\n\n")
        parts += section
    return parts


def available_skills(files: Mapping[str, MemoryFileData]) -> str:
    """The `<available_skills>` list: each skill's name and its description's first line."""
    skills = sorted(
        (path.split("/")[1], file)
        for path, file in files.items()
        if path.startswith("skills/") and path.endswith("/SKILL.md")
    )
    if not skills:
        return ""
    lines = ["<available_skills>"]
    for name, file in skills:
        first = (file.description or "").strip().split("\n", 1)[0]
        lines.append(f"- {name}: {first}" if first else f"- {name}")
    lines.append("</available_skills>")
    return "\n".join(lines)
