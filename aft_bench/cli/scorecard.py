"""`aft-bench scorecard WORLD`: what a real MCP server does to a call re-issued after its answer was lost, tool by
tool, with the gateway's key and verification, and whether its annotations agree; `--against VERSION` shows what
changed from another version; `--fail-on` makes it a gate for a server's own CI (exit 1)."""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path
from typing import Any


WORLD_FILE = "world.toml"


def _world_path(ref: str, worlds: Path) -> Path:
    """A world folder (or its world.toml) given as a path, or a shipped world's name."""
    p = Path(ref)
    if p.exists():
        return p / WORLD_FILE if p.is_dir() else p
    return worlds / ref / WORLD_FILE


def _check_examples(world: Any, listed: list[dict[str, Any]], path: Path) -> None:
    """Every example call's arguments are accepted by the live server's input schema for its tool."""
    from aft_bench.common.errors import InputError
    from aft_bench.scorecard.schemas import refusal

    schemas = {str(t.get("name")): t.get("inputSchema") or {} for t in listed}
    for name, tool in world.tools.items():
        for i, ex in enumerate(tool.examples):
            for where, call_tool, args in [(f"tools.{name}.examples.{i}.args", name, ex.args)] + [
                    (f"tools.{name}.examples.{i}.before.{j}.args", c.tool, c.args) for j, c in enumerate(ex.before)]:
                said = refusal(args, schemas.get(call_tool, {}))
                if said is not None:
                    raise InputError(path, where, args, f"world '{world.id}': the server's schema for {call_tool} "
                                     f"{said}")


def _placeholders(world: Any, path: Path) -> None:
    """A draft's TODO left in the server's package or version or in an example's arguments is bad input: the
    scorecard would otherwise send "TODO" to the server and measure nothing."""
    from aft_bench.common.errors import InputError

    for where, value in (("server.package", world.server.package), ("server.version", world.server.version)):
        if "TODO" in value:
            raise InputError(path, where, value, "still the draft's TODO: name the package you install and its "
                             "version")

    def strings(value: Any) -> list[str]:
        if isinstance(value, str):
            return [value]
        if isinstance(value, dict):
            return [x for v in value.values() for x in strings(v)]
        if isinstance(value, (list, tuple)):
            return [x for v in value for x in strings(v)]
        return []

    for name, tool in world.tools.items():
        for i, ex in enumerate(tool.examples):
            for where, args in [(f"tools.{name}.examples.{i}.args", ex.args)] + [
                    (f"tools.{name}.examples.{i}.before.{j}.args", c.args) for j, c in enumerate(ex.before)]:
                if any("TODO" in x for x in strings(args)):
                    raise InputError(path, where, args, "still the draft's TODO: give the call real arguments, or "
                                     "delete the example")


def _resolved(args: Any, earlier: list[Any], path: Path, where: str) -> Any:
    """An example's `{before.N.field}` filled from the set-up calls' answers, or bad input naming it."""
    from aft_bench.common.errors import InputError
    from aft_bench.scorecard.answers import resolve

    try:
        return resolve(args, earlier)
    except LookupError as exc:
        raise InputError(path, where, args, str(exc)) from None


def _try_examples(world: Any, path: Path) -> list[str]:
    """Each example called once on a fresh server and folder: a call the server answers as failed (isError or a
    failure phrase) is bad input; one that changed nothing is named (a read, or an example that does nothing)."""
    from aft_bench.common.errors import InputError
    from aft_bench.runtime.gateway import Gateway, WorldFailed
    from aft_bench.runtime.trace import Trace
    from aft_bench.scorecard.answers import failure_signal, text_of
    from aft_bench.world import snapshot

    unchanged = []
    for name, tool in sorted(world.tools.items()):
        for i, ex in enumerate(tool.examples):
            gw = Gateway(world, Trace())
            try:
                gw.open()
                earlier: list[dict[str, Any] | None] = []
                for j, call in enumerate(ex.before):
                    d = gw.invoke(call.tool, _resolved(call.args, earlier, path, f"tools.{name}.examples.{i}."
                                                                                  f"before.{j}.args"))
                    answer = d.answer.to_dict() if d.answer else None
                    said = failure_signal(answer, None, world.answers.failure)
                    if said:
                        raise InputError(path, f"tools.{name}.examples.{i}.before.{j}", call.tool, "the server "
                                         f"answered it as failed ({said}): {text_of(answer)[:160]!r}")
                    earlier.append(answer)
                before = gw.final_state()
                d = gw.invoke(name, _resolved(ex.args, earlier, path, f"tools.{name}.examples.{i}.args"))
                said = failure_signal(d.answer.to_dict() if d.answer else None, None, world.answers.failure)
                if said:
                    raise InputError(path, f"tools.{name}.examples.{i}.args", ex.args, "the server answered the "
                                     f"call as failed ({said}): {text_of(d.answer.to_dict())[:160]!r}")
                if not snapshot.diff(before, gw.final_state()):
                    unchanged.append(f"{name} #{i + 1}" if len(tool.examples) > 1 else name)
            except WorldFailed as exc:
                raise InputError(path, exc.field, "", str(exc)) from None
            finally:
                gw.close()
    return unchanged


def live_check(world: Any, path: Path, examples: bool = False) -> str:
    """The world against its live server: no draft placeholder is left, it starts on a fresh folder, the probe
    reads s0 as canonical JSON, every tool the overlay names is listed, every example call is accepted by its
    schema, and (`examples`) answered without a failure. Failing is bad input."""
    from aft_bench.common.errors import InputError
    from aft_bench.runtime.gateway import Gateway, WorldFailed
    from aft_bench.runtime.trace import Trace

    _placeholders(world, path)
    gw = Gateway(world, Trace())
    try:
        gw.open()  # the server starts, lists its tools, the probe reads s0: failing here is bad input
    except WorldFailed as exc:
        raise InputError(path, exc.field, world.server.version if exc.field == "server" else "", str(exc)) from None
    try:
        _check_examples(world, gw.listed, path)
        n = sum(len(t.examples) for t in world.tools.values())
        records = sum(len(v) for v in gw.s0.get("records", {}).values())
        unverified = sum(1 for t in world.tools.values() if not t.verified)
        said = (f"server {gw.server.server_info.get('name')} {gw.server.server_info.get('version')} lists every "
                f"tool; {n} example calls accepted; s0 has {records} records; {unverified} tools unverified")
    finally:
        gw.close()
    if examples:
        unchanged = _try_examples(world, path)
        said += f"; every example answered without a failure" + (
            f"; these changed nothing (reads, or examples that do nothing): {', '.join(unchanged)}"
            if unchanged else "")
    return said


def _measure(world: Any, path: Path, quiet: bool) -> dict[str, Any]:
    from aft_bench.scorecard.card import measure

    from aft_bench.common.secrets import redact, redacted_dumps

    live_check(world, path)
    say = None if quiet else (lambda s: print(redact(f"scorecard {world.id} {world.server.version}: {s}"),
                                              file=sys.stderr))
    # what the server said (its info, its answers) may hold a credential: the card is redacted once, here, so no
    # table, file or gate line shows one
    return json.loads(redacted_dumps(measure(world, progress=say).to_dict()))


def cmd_scorecard(args: argparse.Namespace) -> int:
    from aft_bench.common.files import write_atomic
    from aft_bench.runtime.gateway import WorldFailed
    from aft_bench.scorecard.render import FAIL_ON, compare, failures, markdown, table, to_json
    from aft_bench.world.external import load_external

    fail_on = tuple(x for x in (args.fail_on or "").split(",") if x)
    bad = [x for x in fail_on if x not in FAIL_ON]
    if bad:
        print(f"aft-bench: error: --fail-on: unknown class {bad[0]!r}; known: {', '.join(FAIL_ON)}", file=sys.stderr)
        return 2
    path = _world_path(args.world, args.worlds_dir(args.worlds))
    world = load_external(path)
    if args.version:
        world = world.with_version(args.version)
    try:
        card = _measure(world, path, args.quiet)
        other = _measure(world.with_version(args.against), path, args.quiet) if args.against else None
    except WorldFailed as exc:
        from aft_bench.common.secrets import redact

        print(redact(f"aft-bench: {exc}"), file=sys.stderr)
        return 1
    if args.json:  # the card (and with --against the other and what changed) as JSON on stdout, for scripts
        doc = card if other is None else {"card": card, "against": other, "changes": compare(other, card)}
        print(json.dumps(doc, indent=2, sort_keys=True))
    else:
        print(table(card))
    if other is not None and not args.json:
        print()
        print(table(other))
        changes = compare(other, card)
        print()
        print(f"changed from {other['version']} to {card['version']}:" if changes else
              f"nothing changed from {other['version']} to {card['version']}")
        for line in changes:
            print(f"  {line}")
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        stem = f"{card['world']}-{card['version']}"
        files = {f"{stem}.json": to_json(card), f"{stem}.md": markdown(card)}
        if other is not None:
            files[f"{other['world']}-{other['version']}.json"] = to_json(other)
            files[f"{other['world']}-{other['version']}.md"] = markdown(other)
        for name, text in files.items():
            write_atomic(out / name, text)
        print(f"written: {', '.join(str(out / n) for n in files)}")
    failed = failures(card, fail_on)
    for line in failed:
        print(f"scorecard gate: {line}", file=sys.stderr)
    return 1 if failed else 0


def _absolute_args(command: list[str]) -> list[str]:
    """A command's relative paths that exist from the current folder made absolute: the server starts in its
    episode's folder, where `.worlds/...` would name nothing."""
    out = []
    for c in command:
        if "{" not in c and not os.path.isabs(c) and "/" in c and os.path.exists(c):
            c = os.path.abspath(c)
        out.append(c)
    return out


def cmd_init_world(args: argparse.Namespace) -> int:
    """Start the server in an empty folder, list its tools, measure what it can, and draft a world folder."""
    from aft_bench.common.errors import InputError
    from aft_bench.scorecard.drafting import NothingToDraft, draft_folder
    from aft_bench.world.external import load_external
    from aft_bench.world.mcp_stdio import ServerFailed

    command = _absolute_args(args.command[1:] if args.command[:1] == ["--"] else list(args.command))
    if not command:
        raise InputError("init-world", "COMMAND", "", "give the server's command after --")
    if not re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", args.name) or set(args.name) == {"."}:
        raise InputError("init-world", "NAME", args.name, "a world's id is 1 to 64 letters, digits, '_', '.' and '-' "
                         "(it names a folder under --worlds)")
    # the draft goes where the help says: --into, else --worlds/NAME, else ./worlds/NAME under the current folder
    # (never into the project's own worlds/, wherever the command is run from)
    base = Path(args.worlds) if args.worlds else Path.cwd() / "worlds"
    target = Path(os.path.abspath(args.into if args.into is not None else base / args.name))
    if (target / WORLD_FILE).exists():
        raise InputError(target / WORLD_FILE, "init-world", str(target), "already exists; give a new name")
    try:  # what the server says on stderr is shown when it fails (credentials redacted)
        d = draft_folder(args.name, command, target, args.timeout)
    except ServerFailed as exc:
        print(f"aft-bench: init-world: {exc}", file=sys.stderr)
        return 1
    except NothingToDraft as exc:
        print(f"aft-bench: init-world: {exc}", file=sys.stderr)
        return 1
    world = load_external(target)
    writes = world.writes()
    pkg = f"{d.installed[0]} {d.installed[1]} (read from the install)" if d.installed else \
        "package and version unknown (the install could not be read: fill them in)"
    shown = os.path.relpath(target) if target.is_relative_to(Path.cwd()) else str(target)
    print(f"drafted {shown}/{WORLD_FILE}: {len(d.listed)} tools, {len(writes)} may write ({len(d.measured)} measured "
          f"with no arguments)\n  server: {pkg}\n  probe: {d.probe.builtin}"
          + (f" {d.probe.path}" if d.probe.path != "." else "") + f" ({d.probe.why})\n"
          f"next: give each example real arguments (or delete it), then\n  aft-bench validate --live {shown}\n"
          f"  aft-bench scorecard {shown}")
    return 0


def add_parsers(sub: Any, worlds_dir: Any) -> None:
    from aft_bench.cli.flags import number

    iw = sub.add_parser("init-world", help="draft a world folder from a live MCP server: NAME -- COMMAND ARGS...")
    iw.add_argument("name", help="the world's id (its folder under --worlds)")
    iw.add_argument("command", nargs="*", help="-- then the server's command ({root}: its folder)")
    iw.add_argument("--into", help="the folder to draft into (default: WORLDS/NAME)")
    iw.add_argument("--timeout", type=number(0, 600, lo_open=True), default=60.0, help="seconds the server may take to answer")
    iw.add_argument("--worlds", help="the worlds folder to draft NAME into (default: ./worlds of the current folder)")
    iw.set_defaults(func=cmd_init_world, worlds_dir=worlds_dir)

    sc = sub.add_parser("scorecard", help="what a real MCP server does to a call re-issued after a lost answer, "
                        "tool by tool, and whether its annotations agree")
    sc.add_argument("world", help="a shipped external world's name (git, filesystem, memory) or a world folder")
    sc.add_argument("--version", help="another installed version of the world's server")
    sc.add_argument("--against", metavar="VERSION", help="also measure this version and show what changed")
    sc.add_argument("--out", help="folder to write WORLD-VERSION.json and .md into")
    sc.add_argument("--fail-on", help="comma-separated: exit 1 when a tool shows one (duplicate, false-failure, "
                    "silent-success, annotation, undeclared)")
    sc.add_argument("--quiet", action="store_true", help="no progress lines")
    sc.add_argument("--json", action="store_true", help="print the card as JSON (with --against: both cards and what "
                    "changed) instead of the table")
    sc.add_argument("--worlds", help="the worlds folder a world name is looked up in (default: ./worlds)")
    sc.set_defaults(func=cmd_scorecard, worlds_dir=worlds_dir)
