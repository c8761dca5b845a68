"""A world folder drafted from a live server's tools (`aft-bench init-world`): the package and version read from
the install, a built-in probe chosen from the server's command, each tool's effect from its annotations, its
measured call where it needs no arguments, or its name, and example templates for a person to finish. What was
measured and what was guessed is said beside each tool; nothing here is trusted until a person has checked it."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any, Sequence

from aft_bench.world.external import FAILURE_PHRASES

SAMPLE = {"string": "TODO", "integer": 1, "number": 1, "boolean": False, "array": [], "object": {}}  # by type
# what a draft puts where a person must give a value: every one says TODO, which validate --live refuses
PLACE = {"array": ["TODO"], "object": {"TODO": "TODO"}}
TODO = "TODO"
# a tool with no annotation whose name starts with one of these is drafted a read (and said to be a guess)
READ_WORDS = ("list", "get", "read", "search", "find", "filter", "describe", "show", "count", "view", "fetch",
              "stats", "statistics", "status", "info", "inspect", "lookup", "browse", "query")
DB_SUFFIXES = (".db", ".sqlite", ".sqlite3", ".db3")


@dataclass(frozen=True)
class ProbeDraft:
    """The built-in probe a command suggests: its reader, the path it reads, and why it was picked."""

    builtin: str
    path: str
    why: str


def pick_probe(command: Sequence[str], package: str | None = None) -> ProbeDraft:
    """The probe a server's command suggests: a `{root}/...` database file (`sqlite`), JSON-lines file (`jsonl`)
    or other file (`folder` naming it), a git server (`git`), else the whole folder."""
    for arg in command:
        value = arg.split("=", 1)[1] if re.match(r"^-?-?[A-Za-z_][\w-]*=", arg) else arg
        if not value.startswith("{root}/"):
            continue
        rel = value.removeprefix("{root}/").strip("/")
        if not rel or "{" in rel or ".." in PurePosixPath(rel).parts:
            continue
        suffix = PurePosixPath(rel).suffix.lower()
        if suffix in DB_SUFFIXES:
            return ProbeDraft("sqlite", rel, f"the command names a database file, {value}")
        if suffix == ".jsonl":
            return ProbeDraft("jsonl", rel, f"the command names a JSON-lines file, {value}")
        if suffix:
            return ProbeDraft("folder", rel, f"the command names one file, {value}")
    if package and "git" in package.lower().split("-"):
        return ProbeDraft("git", ".", f"{package} serves a git repository")
    return ProbeDraft("folder", ".", "the server works in its folder")


def _toml(value: Any) -> str:
    """A TOML inline value for JSON-shaped data."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{_key(k)} = {_toml(v)}" for k, v in value.items()) + " }" if value else "{}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    if isinstance(value, str):
        return _str(value)
    if isinstance(value, float) and value != value or value in (float("inf"), float("-inf")):
        return _str(str(value))
    return json.dumps(value)


def _str(text: str) -> str:
    """A TOML basic string: JSON's escapes, but characters beyond ASCII kept as they are (TOML refuses the
    surrogate pairs JSON would write for an emoji) and DEL escaped."""
    text = text.encode("utf-8", "replace").decode("utf-8")  # a lone surrogate, which no file can hold, as '?'
    return json.dumps(text, ensure_ascii=False).replace("\x7f", "\\u007f").replace("\u2028", "\\u2028")


def _key(k: str) -> str:
    return k if re.fullmatch(r"[A-Za-z0-9_-]+", k) else _str(k)


def example(schema: dict[str, Any]) -> dict[str, Any]:
    """Placeholder arguments: every required property with a value of its type (TODO for text)."""
    props = schema.get("properties") or {}
    if not isinstance(props, dict):
        props = {}
    required = schema.get("required") or []
    return {str(name): PLACE.get(str((props.get(name) or {}).get("type")), TODO)
            for name in (required if isinstance(required, list) else [])}


def _words(name: str) -> list[str]:
    return [w.lower() for w in re.split(r"[_\-.\s]+|(?<=[a-z])(?=[A-Z])", name) if w]


def guessed_read(name: str) -> bool:
    """A tool's name that says it reads (`list_tables`, `getTodo`, `describe-table`)."""
    words = _words(name)
    return bool(words) and words[0] in READ_WORDS


@dataclass(frozen=True)
class ToolDraft:
    """One tool's drafted overlay: its effect, how that was decided, and its example template (None: a read)."""

    name: str
    effect: str
    how: str
    annotations: dict[str, Any]
    example: dict[str, Any] | None


def draft_tool(tool: dict[str, Any], measured: bool | None) -> ToolDraft:
    """`measured`: whether the tool's call with no arguments changed the state (None: it was not called)."""
    name = str(tool.get("name"))
    a = tool.get("annotations") if isinstance(tool.get("annotations"), dict) else {}
    schema = tool.get("inputSchema") if isinstance(tool.get("inputSchema"), dict) else {}
    if measured is not None:
        effect = "write" if measured else "read"
        how = f"measured: its call with no arguments {'changed' if measured else 'did not change'} the state"
    elif "readOnlyHint" in a:
        effect = "read" if a.get("readOnlyHint") else "write"
        how = f"declared: readOnlyHint={str(bool(a.get('readOnlyHint'))).lower()}"
    elif guessed_read(name):
        effect, how = "read", "guessed from its name (no annotation): give it an example to measure it"
    else:
        effect, how = "write", "assumed a write (no annotation): its example is measured by the scorecard"
    return ToolDraft(name, effect, how, dict(a), example(schema) if effect == "write" else None)


def draft(name: str, command: Sequence[str], listed: list[dict[str, Any]], info: dict[str, Any],
          installed: tuple[str, str] | None, probe: ProbeDraft, measured: dict[str, bool]) -> str:
    """The text of a drafted `world.toml`."""
    package, version = installed if installed is not None else (TODO, TODO)
    said = " ".join(f"{info.get('name', '?')} {info.get('version', '?')}".split())[:200]  # one comment line
    source = ("read from the install" if installed is not None else
              "TODO: the install could not be read; name the package you install and its version")
    lines = [
        f"# Drafted by `aft-bench init-world` from a live server (it calls itself {said}). Give each example real",
        "# arguments (or delete it), check each tool's overlay, then `aft-bench validate --live` this folder.",
        'kind = "mcp_stdio"', f"id = {_str(name)}",
        f"description = {_str(f'{package} as a world, drafted by init-world')}",
        "# another writer's change to the folder, for stale-state faults: commands run in it",
        "foreign = []", "", "[server]",
        f"package = {_str(package)}  # {source}",
        f"version = {_str(version)}",
        f"command = {_toml(list(command))}  # {{root}} is the episode's folder, {{world}} this world's", "",
        "[fixture]", "# the files and commands that prepare a fresh folder for each episode (none: it starts empty)",
        "files = {}", "commands = []", "", "[probe]",
        f"# how the real state is read without the server: {probe.why}",
        f"builtin = {_str(probe.builtin)}"]
    if probe.path != ".":
        lines.append(f"path = {_str(probe.path)}")
    lines += ["", "[answers]", "# what this server's answers say when a call failed but isError is false (whole words,"
              " any case)", f"failure = {_toml(list(FAILURE_PHRASES))}", ""]
    seen: set[str] = set()
    for tool in sorted(listed, key=lambda t: str(t.get("name"))):
        if str(tool.get("name")) in seen:  # a server listing one name twice: TOML holds one table per name
            continue
        seen.add(str(tool.get("name")))
        d = draft_tool(tool, measured.get(str(tool.get("name"))))
        hints = ", ".join(f"{k}={str(v).lower()}" for k, v in sorted(d.annotations.items())
                          if str(k).endswith("Hint")) or "none"
        lines += [f"[tools.{_key(d.name)}]", f'effect = "{d.effect}"']
        if d.effect == "write":
            lines += [f"idempotent = {_toml(bool(d.annotations.get('idempotentHint', False)))}",
                      f"destructive = {_toml(bool(d.annotations.get('destructiveHint', True)))}"]
        lines += ["verified = false", f"note = {_str(f'{d.how}; annotations: {hints}')}"]
        if d.example is not None:
            lines.append(f"examples = [{{ args = {_toml(d.example)} }}]  # TODO: a real call")
        lines.append("")
    return "\n".join(lines)
