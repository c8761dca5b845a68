"""A world folder drafted from a live server's tools (`aft-bench init-world`): its tools as an effect overlay
drafted from the annotations the server declares, marked unverified, with fixture, probe, identity and example
templates for a person to finish. Nothing here is trusted until a person has checked it."""

from __future__ import annotations

import json
from typing import Any, Sequence

SAMPLE = {"string": "TODO", "integer": 1, "number": 1, "boolean": False, "array": [], "object": {}}


def _toml(value: Any) -> str:
    """A TOML inline value for JSON-shaped data."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{_key(k)} = {_toml(v)}" for k, v in value.items()) + " }" if value else "{}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return json.dumps(value)


def _key(k: str) -> str:
    return k if k.replace("_", "").replace("-", "").isalnum() else json.dumps(k)


def _example(schema: dict[str, Any]) -> dict[str, Any]:
    """Placeholder arguments: every required property with a value of its type."""
    props = schema.get("properties") or {}
    return {name: SAMPLE.get(str((props.get(name) or {}).get("type")), "TODO") for name in schema.get("required") or []}


def draft(name: str, command: Sequence[str], listed: list[dict[str, Any]], info: dict[str, Any]) -> str:
    """The text of a drafted `world.toml`."""
    lines = [
        f"# Drafted by `aft-bench init-world` from {info.get('name', '?')} {info.get('version', '?')}. Finish every TODO,",
        "# check each tool's overlay against what the server really does, then set verified = true.",
        'kind = "mcp_stdio"', f"id = {json.dumps(name)}", f"description = {json.dumps('TODO: what this server is')}",
        "# another writer's change to the folder, for stale-state faults: commands run in it",
        "foreign = []", "", "[server]",
        f"package = {json.dumps(str(info.get('name', name)))}  # TODO: the package you install",
        f"version = {json.dumps(str(info.get('version', '0')))}  # TODO: the pinned version",
        f"command = {_toml(list(command))}  # {{root}} is the episode's folder", "",
        "[fixture]", "# TODO: the files and commands that prepare a fresh folder for each episode",
        "files = {}", "commands = []", "", "[probe]",
        '# TODO: how the real state is read without the server: builtin = "folder", "git" or "jsonl_graph" (with',
        '# path = "file.jsonl"), or command = [...] printing {"records": {...}}', 'builtin = "folder"', ""]
    for tool in sorted(listed, key=lambda t: str(t.get("name"))):
        a = tool.get("annotations") or {}
        read = bool(a.get("readOnlyHint", False))
        hints = ", ".join(f"{k}={str(v).lower()}" for k, v in sorted(a.items()) if k.endswith("Hint")) or "none"
        lines += [f"[tools.{_key(str(tool['name']))}]", f'effect = "{"read" if read else "write"}"']
        if not read:
            lines += [f"idempotent = {_toml(bool(a.get('idempotentHint', False)))}",
                      f"destructive = {_toml(bool(a.get('destructiveHint', True)))}"]
        lines += ["verified = false", f"note = {json.dumps('drafted from the annotations: ' + hints)}"]
        if not read:
            lines += ['# identity = { collection = "files", key_arg = "path" }  # TODO: what one effect leaves in the '
                      "snapshot", f"examples = [{{ args = {_toml(_example(tool.get('inputSchema') or {}))} }}]  "
                      "# TODO: a real call (paths under /workspace)"]
        lines.append("")
    return "\n".join(lines)
