"""Tools: a function, its JSON-Schema ``input_schema`` and its policy, in one object.

A tool is written as a plain function whose first parameter is the :class:`ToolContext`;
:func:`tool` reads the rest of the signature (type hints, defaults, ``Annotated``
descriptions, ``Literal`` choices) and the docstring to build the schema the model sees,
so the schema and the code cannot drift apart.

Tools signal a problem the model should see by raising :class:`ToolError`. The
:class:`ToolRegistry` turns that, bad arguments, unknown tool names and even unexpected
exceptions into ``is_error`` results: a tool never ends the run.

Every tool has a ``kind`` (:data:`ToolKind`): ``read`` (looks, changes nothing), ``edit``
(changes files in the project) or ``execute`` (runs commands, so it can do anything). The
kind is the tool's *policy*: the permission layer (``agent_code.policy``)
decides from it whether a call may run, so no code ever special-cases a tool's name.

The :class:`ToolContext` carries what tools share during one session besides the root:
:class:`FileState` (which files the model has read, and what they looked like then; the
edit tools refuse to change a file the model has not seen, or one that changed since)
and :class:`Backup` records of every file's content before a tool changed it (the hook
for a later ``/undo``).
"""

from __future__ import annotations

import builtins
import hashlib
import inspect
import os
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Callable, Literal, get_args, get_origin

from agent_code.types import ToolCall, ToolResult

if typing.TYPE_CHECKING:
    from agent_code.confine import Wall

MAX_RESULT_CHARS = 30_000


class ToolError(Exception):
    """A failure the model should read and can recover from (``is_error: true``)."""


ToolKind = Literal["read", "edit", "execute"]
TOOL_KINDS: tuple[str, ...] = get_args(ToolKind)


# --- session state shared by the tools ------------------------------------------------

@dataclass(frozen=True)
class FileStamp:
    """What a file looked like when the model last saw it (read it, or wrote it).

    Two stamps are equal only when mtime, size *and* content agree: mtimes tick coarsely
    (a same-size rewrite within one tick keeps the mtime), so the digest closes that gap.
    """

    mtime_ns: int
    size: int
    sha256: str

    @classmethod
    def of(cls, path: Path, data: bytes) -> "FileStamp":
        """The stamp of ``path`` whose content is ``data`` (stat taken now)."""
        st = os.stat(path)
        return cls(st.st_mtime_ns, st.st_size, hashlib.sha256(data).hexdigest())


@dataclass
class FileState:
    """Which files the model has seen in this session, keyed by resolved (real) path."""

    stamps: dict[Path, FileStamp] = field(default_factory=dict)

    def record(self, path: Path, data: bytes) -> FileStamp:
        stamp = FileStamp.of(path, data)
        self.stamps[Path(path)] = stamp
        return stamp

    def get(self, path: Path) -> FileStamp | None:
        return self.stamps.get(Path(path))


@dataclass(frozen=True)
class Backup:
    """A file's content just before a tool changed it; ``before is None``: it did not exist."""

    path: Path
    before: bytes | None
    tool: str


@dataclass
class ToolContext:
    """What a tool may touch. ``root`` is the ``--cwd`` boundary, already resolved.

    ``files`` and ``backups`` are session state: one context lives as long as one agent
    conversation, so a read in one turn allows an edit in a later one.
    """

    root: Path
    files: FileState = field(default_factory=FileState)
    backups: list[Backup] = field(default_factory=list)
    # set by the agent loop before each call: the call runs only because its command is
    # read-only (plan mode), so the bash tool neutralises the config that names programs
    read_only_commands: bool = False
    # the project's own skills (.agents/skills) may be loaded: False in a folder the user has not
    # trusted (agent/trust.py; set by agent/settings.py's configure_agent)
    project_skills: bool = True
    # the OS sandbox the bash tool's commands run in (agent_code/confine); None: unconfined
    wall: Wall | None = None

    def __post_init__(self) -> None:
        self.root = Path(self.root).resolve()


@dataclass
class Tool:
    name: str
    description: str
    input_schema: dict[str, Any]
    fn: Callable[..., str]
    kind: ToolKind = "read"
    # where the tool comes from: None for agent-code's own, "mcp:SERVER" for an MCP server's
    # (agent_code/mcp). The policy reads a ``command`` argument as a shell command line only
    # for its own tools: an MCP tool's arguments mean what its server makes of them.
    origin: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in TOOL_KINDS:
            raise ValueError(f"tool '{self.name}': kind must be one of {TOOL_KINDS}, got {self.kind!r}")

    @property
    def read_only(self) -> bool:
        """True for tools that change nothing (kind ``read``)."""
        return self.kind == "read"

    def to_anthropic(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description, "input_schema": self.input_schema}


# --- schema from type hints -----------------------------------------------------------

_JSON_TYPES: dict[Any, str] = {str: "string", int: "integer", float: "number", bool: "boolean",
                               list: "array", dict: "object"}


def _schema_for(annotation: object) -> dict[str, Any]:
    description = None
    if get_origin(annotation) is Annotated:
        annotation, *extras = get_args(annotation)
        description = next((e for e in extras if isinstance(e, str)), None)
    schema: dict[str, Any]
    origin = get_origin(annotation)
    if origin in (typing.Union, types.UnionType):  # Optional[X] -> X
        inner = [a for a in get_args(annotation) if a is not type(None)]
        schema = _schema_for(inner[0]) if len(inner) == 1 else {}
    elif origin is Literal:
        choices = list(get_args(annotation))
        schema = {"type": _JSON_TYPES[type(choices[0])], "enum": choices}
    elif origin in (list, dict):
        schema = {"type": _JSON_TYPES[origin]}
        args = get_args(annotation)
        if origin is list and args:
            schema["items"] = _schema_for(args[0])
    elif annotation in _JSON_TYPES:
        schema = {"type": _JSON_TYPES[annotation]}
    else:
        raise TypeError(f"no JSON schema for annotation {annotation!r}")
    if description:
        schema["description"] = description
    return schema


def schema_from_signature(fn: Callable[..., Any]) -> dict[str, Any]:
    hints = typing.get_type_hints(fn, include_extras=True)
    params = list(inspect.signature(fn).parameters.values())[1:]  # skip the context
    properties: dict[str, Any] = {}
    required: list[str] = []
    for p in params:
        properties[p.name] = _schema_for(hints[p.name])
        if p.default is inspect.Parameter.empty:
            required.append(p.name)
    return {"type": "object", "properties": properties, "required": required,
            "additionalProperties": False}


def tool(name: str | None = None, *, kind: ToolKind = "read") -> Callable[[Callable[..., str]], Tool]:
    """Decorator: ``@tool()`` turns ``def f(ctx, a: Annotated[str, "doc"]) -> str`` into a Tool;
    ``@tool(kind="edit")`` / ``@tool(kind="execute")`` for tools that change things."""

    def wrap(fn: Callable[..., str]) -> Tool:
        doc = inspect.cleandoc(fn.__doc__ or "").strip()
        return Tool(name=name or fn.__name__, description=doc, input_schema=schema_from_signature(fn),
                    fn=fn, kind=kind)

    return wrap


# --- argument validation --------------------------------------------------------------

def _type_ok(value: object, json_type: str) -> bool:
    if json_type == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if json_type == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    py = {"string": str, "boolean": bool, "array": list, "object": dict}.get(json_type)
    return py is None or isinstance(value, py)


def validate_arguments(schema: dict[str, Any], args: object) -> list[str]:
    """Check ``args`` against the subset of JSON Schema our tools use; return the problems."""
    if not isinstance(args, dict):
        return [f"arguments must be a JSON object, got {type(args).__name__}"]
    problems: list[str] = []
    props: dict[str, Any] = schema.get("properties", {})
    for key in schema.get("required", []):
        if key not in args:
            problems.append(f"missing required argument '{key}'")
    for key, value in args.items():
        spec = props.get(key)
        if spec is None:
            if schema.get("additionalProperties", True) is False:
                allowed = ", ".join(props) or "none"
                problems.append(f"unknown argument '{key}' (allowed: {allowed})")
            continue
        if not isinstance(spec, dict):  # a boolean schema (an MCP server's JSON Schema may hold one)
            continue
        if isinstance(spec.get("type"), str) and not _type_ok(value, spec["type"]):
            problems.append(f"argument '{key}' must be of type {spec['type']}, got {type(value).__name__}")
        elif "enum" in spec and value not in spec["enum"]:
            problems.append(f"argument '{key}' must be one of {spec['enum']}, got {value!r}")
    return problems


# --- registry -------------------------------------------------------------------------

@dataclass
class ToolRegistry:
    tools: dict[str, Tool] = field(default_factory=dict)
    max_result_chars: int = MAX_RESULT_CHARS

    def register(self, t: Tool) -> Tool:
        if t.name in self.tools:
            raise ValueError(f"tool '{t.name}' is already registered")
        self.tools[t.name] = t
        return t

    def get(self, name: str) -> Tool | None:
        return self.tools.get(name)

    def list(self) -> list[Tool]:
        return list(self.tools.values())

    def schemas(self) -> builtins.list[dict[str, Any]]:  # (`list` here is the method above)
        return [t.to_anthropic() for t in self.tools.values()]

    def run(self, call: ToolCall, ctx: ToolContext) -> ToolResult:
        def fail(message: str) -> ToolResult:
            return ToolResult(call.id, message, is_error=True)

        t = self.tools.get(call.name)
        if t is None:
            return fail(f"unknown tool '{call.name}'; available tools: {', '.join(self.tools)}")
        args = call.arguments
        if isinstance(args, dict):  # models often send null for an optional argument: omit it
            required = set(t.input_schema.get("required", []))
            args = {k: v for k, v in args.items() if v is not None or k in required}
        problems = validate_arguments(t.input_schema, args)
        if problems or not isinstance(args, dict):  # (validate_arguments refuses a non-dict)
            return fail(f"invalid arguments for {t.name}: " + "; ".join(problems))
        try:
            out = t.fn(ctx, **args)
        except ToolError as exc:
            return fail(str(exc))
        except Exception as exc:  # a tool bug must not end the run; the model sees it
            return fail(f"{t.name} failed: {type(exc).__name__}: {exc}")
        return ToolResult(call.id, truncate(str(out), self.max_result_chars))


def truncate(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n… [truncated: {len(text) - limit} more characters]"
