"""ExportAgent / ImportAgent: agents as one JSON file, with fresh ids on import.

The file format (`cairn.agent-file`, version 1) is specified in docs/agent-file.md. It holds
no secrets: agents, blocks, tools and in-context messages only.
"""

from __future__ import annotations

import binascii
import json
import time
from dataclasses import replace
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from cairn_server.auth import Principal
from cairn_server.errors import InvalidArgument, NotFound
from state_service import access, validation
from state_service.agents import RESERVED_TOOL_NAMES
from state_service.core import Deps, agent_not_found
from state_service.memfs.files import check_path, parse_file
from state_service.models import (
    Agent,
    Block,
    MemoryMode,
    MemoryUpdateMode,
    Message,
    Role,
    Tool,
    ToolCall,
    ToolRule,
    ToolRuleType,
)
from state_service.window import count_message

FORMAT: Literal["cairn.agent-file"] = "cairn.agent-file"
VERSION = 1


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class FileBlock(_Strict):
    """A block in an agent file."""

    id: str
    label: str
    value: str = ""
    limit: int = 20_000
    description: str = ""
    read_only: bool = False
    hidden: bool = False
    tags: list[str] = Field(default_factory=list)
    metadata: dict[str, Any] = Field(default_factory=dict)


class FileTool(_Strict):
    """A tool in an agent file."""

    name: str
    description: str = ""
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})


class FileToolRule(_Strict):
    """A tool rule in an agent file."""

    type: ToolRuleType
    tool_name: str
    children: list[str] = Field(default_factory=list)
    max_count: int = 0
    default_child: str = ""
    child_output_mapping: dict[str, str] = Field(default_factory=dict)
    prompt_template: str = ""


class FileToolCall(_Strict):
    """A tool call of an exported message."""

    id: str
    name: str
    arguments: str


class FileMessage(_Strict):
    """An in-context message in an agent file."""

    id: str
    role: Literal["user", "assistant", "tool", "summary"]
    content: str = ""
    tool_calls: list[FileToolCall] = Field(default_factory=list)
    tool_call_id: str = ""
    name: str = ""
    created_at: float = 0.0


class FileGitObject(_Strict):
    """One raw git object of a MEMFS repository (base64 of git's own encoding)."""

    type: Literal["commit", "tree", "blob"]
    data: str


class FileMemfs(_Strict):
    """A MEMFS agent's repository: its revision and every object reachable from it."""

    head: str
    objects: list[FileGitObject]


class FileAgent(_Strict):
    """An agent in an agent file."""

    id: str
    name: str
    system: str = ""
    model: str = ""
    context_window: int = 128_000
    memory_mode: MemoryMode = MemoryMode.STANDARD
    memory_update_mode: MemoryUpdateMode = MemoryUpdateMode.SYSTEM_PROMPT
    memory_updated_at: float = 0.0
    tags: list[str] = Field(default_factory=list)
    metadata: dict[str, Any] = Field(default_factory=dict)
    tools: list[FileTool] = Field(default_factory=list)
    tool_rules: list[FileToolRule] = Field(default_factory=list)
    block_ids: list[str] = Field(default_factory=list)
    messages: list[FileMessage] = Field(default_factory=list)
    memfs: FileMemfs | None = None


class AgentFile(_Strict):
    """The whole file."""

    format: Literal["cairn.agent-file"]
    version: int
    exported_at: float = 0.0
    blocks: list[FileBlock] = Field(default_factory=list)
    agents: list[FileAgent]


def _file_agent(deps: Deps, agent: Agent, messages: list[Message]) -> FileAgent:
    memfs = None
    if agent.memory_mode is MemoryMode.MEMFS:
        objects = deps.snapshots().repos.open(agent.id).export_objects(agent.memory_head)
        memfs = FileMemfs(
            head=agent.memory_head,
            objects=[FileGitObject(type=o["type"], data=o["data"]) for o in objects],  # type: ignore[arg-type]
        )
    return FileAgent(
        memfs=memfs,
        id=agent.id,
        name=agent.name,
        system=agent.system,
        model=agent.model,
        context_window=agent.context_window,
        memory_mode=agent.memory_mode,
        memory_update_mode=agent.memory_update_mode,
        memory_updated_at=agent.memory_updated_at,
        tags=agent.tags,
        metadata=agent.metadata,
        tools=[
            FileTool(
                name=t.name, description=t.description, parameters=json.loads(t.parameters_json)
            )
            for t in agent.tools
        ],
        tool_rules=[
            FileToolRule(
                type=r.type,
                tool_name=r.tool_name,
                children=list(r.children),
                max_count=r.max_count,
                default_child=r.default_child,
                child_output_mapping=dict(r.child_output_mapping),
                prompt_template=r.prompt_template,
            )
            for r in agent.tool_rules
        ],
        block_ids=[b.id for b in agent.blocks],
        messages=[
            FileMessage(
                id=m.id,
                role=m.role.value,  # type: ignore[arg-type]
                content=m.content,
                tool_calls=[
                    FileToolCall(id=c.id, name=c.name, arguments=c.arguments_json)
                    for c in m.tool_calls
                ],
                tool_call_id=m.tool_call_id,
                name=m.name,
                created_at=m.created_at,
            )
            for m in messages
            if m.role is not Role.SYSTEM
        ],
    )


def export_agents(deps: Deps, principal: Principal, agent_ids: list[str]) -> str:
    """The agent file for `agent_ids`, each shared block once."""
    if not agent_ids:
        raise InvalidArgument("agent_ids", "name at least one agent to export")
    for agent_id in agent_ids:
        access.require_agent_access(principal, agent_id, "export")
    reader = deps.store.reader()
    agents = reader.load_agents(principal.tenant, list(dict.fromkeys(agent_ids)))
    found = {a.id for a in agents}
    for agent_id in agent_ids:
        if agent_id not in found:
            raise agent_not_found(agent_id)
    blocks: dict[str, Block] = {}
    for agent in agents:
        for block in agent.blocks:
            blocks.setdefault(block.id, block)
    file = AgentFile(
        format=FORMAT,
        version=VERSION,
        exported_at=time.time(),
        blocks=[
            FileBlock(
                id=b.id,
                label=b.label,
                value=b.value,
                limit=b.limit,
                description=b.description,
                read_only=b.read_only,
                hidden=b.hidden,
                tags=b.tags,
                metadata=b.metadata,
            )
            for b in blocks.values()
        ],
        agents=[
            _file_agent(deps, agent, reader.window(principal.tenant, agent.id, deps.counter.name))
            for agent in agents
        ],
    )
    return file.model_dump_json(indent=2)


def _parse(text: str) -> AgentFile:
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as error:
        raise InvalidArgument("agent_file_json", f"is not valid JSON: {error.msg}") from None
    if not isinstance(raw, dict) or raw.get("format") != FORMAT:
        raise InvalidArgument("agent_file_json", f"is not an agent file (format '{FORMAT}')")
    if raw.get("version") != VERSION:
        raise InvalidArgument(
            "agent_file_json",
            f"has version {raw.get('version')!r}; this server reads version {VERSION}",
        )
    try:
        return AgentFile.model_validate(raw)
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise InvalidArgument(f"agent_file_json.{where}", first["msg"]) from None


def import_agents(
    deps: Deps, principal: Principal, text: str
) -> tuple[list[Agent], dict[str, str]]:
    """Creates the file's blocks and agents with fresh ids; returns them and old -> new ids."""
    access.require_manager(principal, "import agents")
    file = _parse(text)
    ids: dict[str, str] = {}
    now = deps.clock()
    blocks: dict[str, Block] = {}
    for i, fb in enumerate(file.blocks):
        if fb.id in blocks:
            raise InvalidArgument(f"agent_file_json.blocks.{i}.id", f"'{fb.id}' appears twice")
        block = Block(
            id=deps.new_id("block"),
            tenant=principal.tenant,
            label=fb.label,
            value=fb.value,
            limit=fb.limit,
            description=fb.description,
            read_only=fb.read_only,
            hidden=fb.hidden,
            tags=fb.tags,
            metadata=fb.metadata,
            created_at=now,
            updated_at=now,
        )
        validation.check_block(f"agent_file_json.blocks.{i}", block)
        blocks[fb.id] = block
        ids[fb.id] = block.id
    agents: list[tuple[Agent, list[Message]]] = []
    for i, fa in enumerate(file.agents):
        agents.append(_import_agent(deps, principal, fa, i, blocks, ids, now))
    restored: list[str] = []
    try:
        for i, (agent, _) in enumerate(agents):
            memfs = file.agents[i].memfs
            if memfs is not None:
                restored.append(agent.id)
                _restore_repository(deps, agent, memfs, f"agent_file_json.agents.{i}.memfs")
        with deps.store.transaction() as tx:
            for block in blocks.values():
                tx.insert_block(block)
            for agent, messages in agents:
                tx.insert_agent(agent, deps.tools_payload(agent))
                if agent.memory_mode is MemoryMode.MEMFS:
                    tx.set_memory_head(agent.tenant, agent.id, agent.memory_head, 1, now)
                tx.set_agent_blocks(agent.id, [b.id for b in agent.blocks])
                tx.insert_messages(principal.tenant, messages, deps.counter.name)
                tx.set_window(agent.id, agent.message_ids)
            tx.save_prompts([deps.build_prompt(agent, now) for agent, _ in agents])
    except BaseException:
        for agent_id in restored:
            deps.snapshots().repos.remove(agent_id)
        raise
    return [agent for agent, _ in agents], ids


def _restore_repository(deps: Deps, agent: Agent, memfs: FileMemfs, where: str) -> None:
    """Writes the exported objects into a new repository; the commit ids come out the same
    because git names objects by their content."""
    repo = deps.snapshots().repos.create(agent.id)
    try:
        repo.import_objects([{"type": o.type, "data": o.data} for o in memfs.objects])
        head = str(repo.commit(memfs.head).id)
    except NotFound:
        raise InvalidArgument(
            f"{where}.head", f"commit '{memfs.head}' is not in the file"
        ) from None
    except (ValueError, binascii.Error) as error:
        raise InvalidArgument(f"{where}.objects", f"is not a set of git objects: {error}") from None
    for path, text in repo.read_files(head).items():
        check_path(f"{where}.objects", path)
        parse_file(f"{where}.objects", path, text)
    repo.set_branch(head)
    agent.memory_head = head


def _import_agent(
    deps: Deps,
    principal: Principal,
    fa: FileAgent,
    index: int,
    blocks: dict[str, Block],
    ids: dict[str, str],
    now: float,
) -> tuple[Agent, list[Message]]:
    where = f"agent_file_json.agents.{index}"
    if fa.id in ids:
        raise InvalidArgument(f"{where}.id", f"'{fa.id}' appears twice")
    validation.check_name(f"{where}.name", fa.name)
    validation.check_context_window(f"{where}.context_window", fa.context_window)
    validation.check_tags(f"{where}.tags", fa.tags)
    if (fa.memory_mode is MemoryMode.MEMFS) != (fa.memfs is not None):
        raise InvalidArgument(
            f"{where}.memfs", "a MEMFS agent carries its repository, and only a MEMFS agent does"
        )
    if fa.memfs is not None and fa.block_ids:
        raise InvalidArgument(f"{where}.block_ids", "a MEMFS agent has no blocks")
    tools = [Tool(t.name, t.description, json.dumps(t.parameters)) for t in fa.tools]
    validation.check_tools(f"{where}.tools", tools, RESERVED_TOOL_NAMES)
    rules = [
        ToolRule(
            type=r.type,
            tool_name=r.tool_name,
            children=tuple(r.children),
            max_count=r.max_count,
            default_child=r.default_child,
            child_output_mapping=tuple(sorted(r.child_output_mapping.items())),
            prompt_template=r.prompt_template,
        )
        for r in fa.tool_rules
    ]
    validation.check_tool_rules(f"{where}.tool_rules", rules)
    missing = [b for b in fa.block_ids if b not in blocks]
    if missing:
        raise InvalidArgument(f"{where}.block_ids", f"names no block of the file: '{missing[0]}'")
    agent_blocks = [blocks[b] for b in fa.block_ids]
    validation.check_unique_labels(f"{where}.block_ids", (b.label for b in agent_blocks))
    agent = Agent(
        id=deps.new_id("agent"),
        tenant=principal.tenant,
        name=fa.name,
        system=fa.system,
        model=fa.model,
        context_window=fa.context_window,
        blocks=agent_blocks,
        tools=tools,
        tool_rules=rules,
        tags=fa.tags,
        metadata=fa.metadata,
        memory_mode=fa.memory_mode,
        memory_update_mode=fa.memory_update_mode,
        memory_updated_at=fa.memory_updated_at or now,
        created_at=now,
        updated_at=now,
        context_version=1,
    )
    ids[fa.id] = agent.id
    system = Message(id=deps.new_id("message"), agent_id=agent.id, role=Role.SYSTEM, created_at=now)
    messages = [system]
    for j, fm in enumerate(fa.messages):
        if fm.id in ids:
            raise InvalidArgument(f"{where}.messages.{j}.id", f"'{fm.id}' appears twice")
        if fm.role == "tool" and not fm.tool_call_id:
            raise InvalidArgument(
                f"{where}.messages.{j}.tool_call_id", "a tool message must name its call"
            )
        message = Message(
            id=deps.new_id("message"),
            agent_id=agent.id,
            role=Role(fm.role),
            content=fm.content,
            tool_calls=tuple(ToolCall(c.id, c.name, c.arguments) for c in fm.tool_calls),
            tool_call_id=fm.tool_call_id,
            name=fm.name,
            step_id="import",
            created_at=fm.created_at or now,
        )
        ids[fm.id] = message.id
        messages.append(replace(message, tokens=count_message(deps.counter, message)))
    agent.system_message_id = system.id
    agent.message_ids = [m.id for m in messages]
    agent.window_size = len(messages)
    agent.message_count = len(messages) - 1
    return agent, messages
