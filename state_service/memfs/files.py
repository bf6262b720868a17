"""Memory files: paths, frontmatter, and the rules a commit must satisfy. Pure functions."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import yaml

from cairn_server.errors import InvalidArgument
from state_service.validation import LABEL_RE

ALLOWED_KEYS = ("description", "read_only", "limit")
NEEDS_DESCRIPTION = ("system/", "reference/")
_SEGMENT = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")
_SKILL = re.compile(r"skills/[A-Za-z0-9_][A-Za-z0-9_.-]*/SKILL\.md")
MAX_PATH = 512


@dataclass(frozen=True, slots=True)
class MemoryFileData:
    """A parsed memory file. `read_only` and `limit` are None when the file does not set
    them, so that adding or removing the key can be told apart from its value."""

    path: str
    content: str
    description: str | None
    read_only: bool | None
    limit: int | None
    body: str

    @property
    def is_read_only(self) -> bool:
        """True when the file says `read_only: true`."""
        return self.read_only is True


def check_path(field: str, path: str) -> None:
    """Paths are relative Markdown paths inside the repository, with safe segments."""
    if not path:
        raise InvalidArgument(field, "a memory file path must not be empty")
    if len(path) > MAX_PATH:
        raise InvalidArgument(field, f"path is longer than {MAX_PATH} characters")
    if path.startswith("/") or re.match(r"[A-Za-z]:[\\/]", path):
        raise InvalidArgument(field, f"'{path}' is absolute; memory paths are relative")
    if "\\" in path:
        raise InvalidArgument(field, f"'{path}' uses a backslash; separate segments with /")
    segments = path.split("/")
    if any(segment in ("..", ".") for segment in segments):
        raise InvalidArgument(field, f"'{path}' escapes the memory repository")
    if not path.endswith(".md"):
        raise InvalidArgument(field, f"'{path}' is not a Markdown file (.md)")
    for segment in segments:
        if not _SEGMENT.fullmatch(segment):
            raise InvalidArgument(
                field,
                f"'{path}' has the segment {segment!r}; use letters, digits, _, - and . and "
                "do not start with . or -",
            )
    if segments[0] == "system":
        for segment in segments[1:]:
            name = segment[:-3] if segment.endswith(".md") else segment
            if not LABEL_RE.fullmatch(name):
                raise InvalidArgument(
                    field,
                    f"'{path}': under system/ each name becomes a tag, and {name!r} is not "
                    "tag-safe (letters, digits, _ and -, starting with a letter or _)",
                )
        if len(segments) < 2:
            raise InvalidArgument(field, f"'{path}' must name a file under system/")
    if segments[0] == "skills" and not _SKILL.fullmatch(path):
        raise InvalidArgument(
            field, f"'{path}': files under skills/ must be skills/<name>/SKILL.md"
        )


def parse_file(field: str, path: str, content: str) -> MemoryFileData:
    """Parses frontmatter and body and checks the frontmatter's keys and types."""
    if not content.startswith("---\n"):
        raise InvalidArgument(
            field, f"'{path}' has no frontmatter: start the file with a '---' line"
        )
    end = content.find("\n---\n", 3)
    if end == -1 and content.endswith("\n---"):
        end = len(content) - 4
    if end == -1:
        raise InvalidArgument(field, f"'{path}': the frontmatter is not closed by a '---' line")
    header = content[4:end]
    body = content[end + 5 :]
    try:
        meta: Any = yaml.safe_load(header) if header.strip() else {}
    except yaml.YAMLError as error:
        problem = getattr(error, "problem", None) or "invalid YAML"
        raise InvalidArgument(field, f"'{path}': the frontmatter is not YAML ({problem})") from None
    if not isinstance(meta, dict):
        raise InvalidArgument(field, f"'{path}': the frontmatter must be a YAML mapping")
    unknown = sorted(str(key) for key in meta if key not in ALLOWED_KEYS)
    if unknown:
        raise InvalidArgument(
            field,
            f"'{path}': frontmatter key '{unknown[0]}' is not allowed; use description, "
            "read_only and limit",
        )
    description = meta.get("description")
    if description is not None and not isinstance(description, str):
        raise InvalidArgument(field, f"'{path}': description must be text")
    read_only = meta.get("read_only")
    if read_only is not None and not isinstance(read_only, bool):
        raise InvalidArgument(field, f"'{path}': read_only must be true or false")
    limit = meta.get("limit")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise InvalidArgument(field, f"'{path}': limit must be a positive whole number")
    if path.startswith(NEEDS_DESCRIPTION) and not (description or "").strip():
        raise InvalidArgument(
            field, f"'{path}': files under system/ and reference/ need a description"
        )
    if limit is not None and len(body) > limit:
        raise InvalidArgument(
            field,
            f"'{path}': the body is {len(body)} characters, longer than its limit of {limit} "
            f"(by {len(body) - limit})",
        )
    return MemoryFileData(path, content, description, read_only, limit, body)


def check_change(field: str, old: MemoryFileData | None, new: MemoryFileData | None) -> None:
    """Read-only files stay as committed, and `read_only` cannot be added or removed."""
    if old is None:
        return
    path = old.path
    if old.is_read_only and (new is None or new.content != old.content):
        action = "deleted" if new is None else "changed"
        raise InvalidArgument(field, f"'{path}' is read-only and cannot be {action}")
    if new is not None and (old.read_only is None) != (new.read_only is None):
        verb = "added to" if old.read_only is None else "removed from"
        raise InvalidArgument(field, f"'{path}': read_only cannot be {verb} a committed file")


def render_file(
    description: str, body: str, read_only: bool = False, limit: int | None = None
) -> str:
    """A memory file's text from its parts."""
    lines = ["---", f"description: {_yaml_string(description)}"]
    if read_only:
        lines.append("read_only: true")
    if limit is not None:
        lines.append(f"limit: {limit}")
    lines.append("---")
    return "\n".join(lines) + "\n" + body


def with_body(file: MemoryFileData, body: str) -> str:
    """The file's text with its frontmatter kept and its body replaced."""
    return file.content[: len(file.content) - len(file.body)] + body


def _yaml_string(text: str) -> str:
    dumped = yaml.safe_dump(text, default_flow_style=True, width=1_000_000, allow_unicode=True)
    return dumped.rstrip("\n").removesuffix("\n...")
