"""A hostile-input probe of aft-bench's external-world surfaces (issue 48), run from outside as a user would.

Each case is one real `aft-bench` command (scorecard, validate --live, init-world, run with an external world's
config, serve driven by a small MCP client, catalog import-mcp) against real server processes: small hostile MCP
servers in `benchmarks/hostile/` (stdio and streamable HTTP, standard library only) and the tests' own
(`tests/data/echo_mcp.py`, `tests/data/hostile_http.py`). No mocks. Cases run one at a time under `nice -n 10`,
each in a fresh folder with its own TMPDIR, and each is judged **clean** as issue 48 defines it:

* the command ends within the case's time limit (120 s unless said): no hang;
* its exit code is the expected one: 2 for bad input, 1 for an output, integrity or server problem, 0 where the
  input is fine, 130 after SIGTERM/SIGINT of a command that handles it;
* its stderr has no Python traceback and no "internal error", and (when it failed) ends in one line that names
  the world, server, file, field or flag (each case says which words count), never a scratch temp path;
* no crash log, and nothing left in its TMPDIR but an empty `aft-bench-scratch` (after a SIGKILL, after the next
  command, which is documented to sweep what the killed one left);
* no orphan: no live process whose argv or environment holds the case's mark (every server gets one) or whose
  working folder lies in the case's folder, 5 s after the command ended;
* no secret: the planted fake key `sk-canary0123456789abcdef0123` (and, in the probe-path cases, the contents of a
  user's file outside the resource) in stdout, stderr or any file the command wrote;
* plus each case's own checks (a draft that loads, failures.jsonl naming the world, no request to another host).

A case the probe could not set up or drive as planned (its trigger never came) is **unjudged**, never clean.

    .venv/bin/python benchmarks/hostile_inputs.py [--only SUBSTRING] [--out FILE] [--list] [--keep]

prints a table (case id, group, surface, expected, observed, clean, why not) and the totals, and writes the same as
Markdown (default `benchmarks/hostile_inputs.md`) with the date and the command. Cases marked `new` are ones the
issue does not name.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import queue
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
AFT = ROOT / ".venv" / "bin" / "aft-bench"
PY = str(ROOT / ".venv" / "bin" / "python")
SERVER = ROOT / "benchmarks" / "hostile" / "server.py"
HTTP = ROOT / "benchmarks" / "hostile" / "http_server.py"
ECHO = ROOT / "tests" / "data" / "echo_mcp.py"
OLD_HTTP = ROOT / "tests" / "data" / "hostile_http.py"
CANARY = "sk-canary0123456789abcdef0123"
TIMEOUT = 120.0
GB = 2 ** 30


# ---------------------------------------------------------------------------------------------------------------
# what a case is


@dataclass
class Run:
    """One command: its arguments after `aft-bench`, where, with what environment, and how it is driven."""

    argv: list[str]
    cwd: Path
    env: dict[str, str] = field(default_factory=dict)
    expect: tuple[int, ...] = (0,)
    client: list[tuple[str, dict[str, Any]]] | None = None  # serve: the tool calls a client makes over stdio
    signals: list[tuple[int, str, float]] = field(default_factory=list)  # (signal, trigger, seconds after it)
    stdout_closed: bool = False
    limit_as: int | None = None  # an address-space limit (bytes), through prlimit
    timeout: float = TIMEOUT


@dataclass
class Case:
    id: str
    group: str
    surface: str
    build: Callable[[Ctx], Run]
    names: tuple[str, ...] = ()  # words the last stderr line must hold one of, when the command failed
    new: bool = False  # a case issue 48 does not name
    after: Callable[[Ctx], Run] | None = None  # the next command (a SIGKILL's sweep, a rerun, a draft's check)
    checks: tuple[Callable[[Ctx, Result], list[str]], ...] = ()
    secrets: tuple[str, ...] = ()  # more secrets than the canary, for this case
    note: str = ""


@dataclass
class Result:
    rc: int | None
    stdout: bytes
    stderr: bytes
    seconds: float
    timed_out: bool
    trigger_missed: list[str]
    client_log: list[str]
    signalled_at: float | None = None  # when the first signal was sent (monotonic)
    ended_at: float | None = None


class Ctx:
    """One case's folder: `work` (its working folder), `tmp` (its TMPDIR), `outside` (a user's files the server
    must never get read back), `state` (counters shared by the case's server starts), and its mark."""

    def __init__(self, base: Path, case: Case, index: int, nonce: str) -> None:
        self.case = case
        self.dir = base / case.id
        self.dir.mkdir(parents=True)
        self.tmp, self.work, self.outside, self.state = (self.dir / n for n in ("tmp", "work", "outside", "state"))
        for d in (self.tmp, self.work, self.outside, self.state):
            d.mkdir()
        self.mark = f"hmk{nonce}c{index:03d}"
        self.leak = f"OUTSIDE-CANARY-{self.mark}"  # the contents of a user's file outside any resource
        self.listener: Listener | None = None
        self.before: dict[str, tuple[int, int]] = {}
        self.before_dirs: set[str] = set()
        (self.outside / "secret.txt").write_text(f"user's private file {self.leak}\n")
        (self.outside / "memory.jsonl").write_text(json.dumps({"type": "entity", "name": self.leak,
                                                               "entityType": "secret", "observations": []}) + "\n")
        (self.outside / "notes.txt").write_text(f"{self.leak}\n")
        import sqlite3

        con = sqlite3.connect(self.outside / "app.db")
        con.execute("CREATE TABLE secrets (v TEXT)")
        con.execute("INSERT INTO secrets VALUES (?)", (self.leak,))
        con.commit()
        con.close()
        self.repo = self.outside / "repo"
        self.repo.mkdir()
        (self.repo / "private.txt").write_text(self.leak + "\n")
        git = ["git", "-c", "user.name=u", "-c", "user.email=u@u", "-c", "init.defaultBranch=main"]
        subprocess.run([*git, "init", "-q"], cwd=self.repo, check=True)
        subprocess.run([*git, "add", "."], cwd=self.repo, check=True)
        subprocess.run([*git, "commit", "-q", "-m", f"private {self.leak}"], cwd=self.repo, check=True)

    # -- worlds ----------------------------------------------------------------------------------------------
    def server_cmd(self, modes: str = "") -> list[str]:
        return [PY, str(SERVER), self.mark, modes]

    def world(self, modes: str = "", *, wid: str = "h", probe: str = 'builtin = "folder"', fixture: str = "",
              tools: str | None = None, env: dict[str, str] | None = None, command: list[str] | None = None,
              server_extra: str = "", call_timeout: float = 3, start_timeout: float = 5, kind: str = "mcp_stdio",
              url: str | None = None, top: str = "", folder: str | None = None, workload: bool = True,
              conditions: tuple[str, ...] = ("GW-bare",)) -> Path:
        """A world folder `work/worlds/<folder or id>` of the hostile server with `modes`; with a workload of one
        task (append under response_loss) and a config `work/cfg.toml` for `run` and `serve`."""
        envs = {"HOSTILE_STATE": str(self.state), "HOSTILE_MARK": self.mark, "HOSTILE_RUNNER_TAG": str(self.dir),
                **(env or {})}
        cmd = command if command is not None else self.server_cmd(modes)
        text = (f'kind = "{kind}"\nid = {tstr(wid)}\n{top}[server]\npackage = "hostile"\nversion = "1"\n'
                f"command = {tarr(cmd)}\nenv = {{ {', '.join(f'{tstr(k)} = {tstr(v)}' for k, v in envs.items())} }}\n"
                f"start_timeout_s = {start_timeout}\ncall_timeout_s = {call_timeout}\n"
                + (f"url = {tstr(url)}\n" if url else "") + server_extra + fixture + f"\n[probe]\n{probe}\n"
                + (tools if tools is not None else TOOLS))
        d = self.work / "worlds" / (folder or wid)
        d.mkdir(parents=True, exist_ok=True)
        (d / "world.toml").write_text(text, encoding="utf-8")
        if workload:
            wl = self.work / "worlds" / "workloads"
            wl.mkdir(exist_ok=True)
            (wl / "h_rl.toml").write_text(WORKLOAD.replace("WORLD", tstr(wid)))
            (self.work / "cfg.toml").write_text(CONFIG.replace('["GW-bare"]', json.dumps(list(conditions))))
        return d

    def http_world(self, mode: str, *, old: bool = False, call_timeout: float = 3, **kw: Any) -> Path:
        cmd = [PY, str(OLD_HTTP), "{port}", mode] if old else [PY, str(HTTP), "{port}", mode, self.mark]
        return self.world(kind="mcp_http", url="http://127.0.0.1:{port}/mcp", command=cmd,
                          call_timeout=call_timeout, **kw)

    def git_world(self, modes: str = "", **kw: Any) -> Path:
        return self.world(modes, probe='builtin = "git"', fixture=GIT_FIXTURE, **kw)

    def benign(self) -> Path:
        """The echo test server's world (no mark): what a sweeping next command runs."""
        d = self.dir / "benign"
        d.mkdir(exist_ok=True)
        (d / "world.toml").write_text(f'kind = "mcp_stdio"\nid = "benign"\n[server]\npackage = "echo"\n'
                                      f'version = "1"\ncommand = {tarr([PY, str(ECHO)])}\n[probe]\n'
                                      'builtin = "folder"\n[tools.append]\neffect = "write"\n'
                                      'examples = [{ args = { text = "hi" } }]\n')
        return d


def tstr(s: str) -> str:
    """A TOML basic string (JSON's escapes; non-ASCII kept as it is)."""
    return json.dumps(s, ensure_ascii=False)


def tarr(items: list[str]) -> str:
    return "[" + ", ".join(tstr(x) for x in items) + "]"


TOOLS = ('[tools.echo]\neffect = "read"\n[tools.append]\neffect = "write"\n'
         'examples = [{ args = { text = "hi" } }]\n')
GIT_FIXTURE = ('\n[fixture]\nfiles = { "README.md" = "seed\\n" }\ncommands = [["git", "init", "-q"], ["git", "add", '
               '"."], ["git", "-c", "user.name=s", "-c", "user.email=s@s", "commit", "-q", "-m", "seed"]]\n'
               'env = { GIT_AUTHOR_DATE = "2020-01-01T00:00:00", GIT_COMMITTER_DATE = "2020-01-01T00:00:00" }\n')
WORKLOAD = """[workload]
id = "h_rl"
world = WORLD
description = "One append on a hostile server, its answer lost."
[[variants]]
id = "response_loss"
faults = [{ kind = "response_loss" }]
[[tasks]]
id = "t1"
world = WORLD
spec = "Append hi to the notes."
goal = [{ collection = "files", where = { }, count = 1 }]
target_ops = ["append"]
allowed_ops = ["echo"]
plan = [{ call = "append", args = { text = "hi" } }]
"""
CONFIG = '[experiment]\nid = "e"\nworkloads = ["h_rl"]\nconditions = ["GW-bare"]\n'


# -- the commands, as a user types them ----------------------------------------------------------------------------


def scorecard(ctx: Ctx, world: Path, expect: tuple[int, ...], **kw: Any) -> Run:
    return Run(["scorecard", str(world), "--quiet", "--out", str(ctx.work / "card")], ctx.work, expect=expect, **kw)


def validate(ctx: Ctx, world: Path, expect: tuple[int, ...] = (2,), **kw: Any) -> Run:
    return Run(["validate", "--live", str(world)], ctx.work, expect=expect, **kw)


def run_cmd(ctx: Ctx, expect: tuple[int, ...] = (1,), **kw: Any) -> Run:
    return Run(["run", str(ctx.work / "cfg.toml"), "--out", str(ctx.work / "out"), "--worlds",
                str(ctx.work / "worlds"), "--workers", "1"], ctx.work, expect=expect, **kw)


def serve_cmd(ctx: Ctx, expect: tuple[int, ...] = (1,), calls: list | None = None, **kw: Any) -> Run:
    return Run(["serve", "--workload", "h_rl", "--task", "t1", "--condition", "GW-bare", "--out",
                str(ctx.work / "served"), "--worlds", str(ctx.work / "worlds"), "--agent", "probe"], ctx.work,
               expect=expect, client=calls if calls is not None else [("append", {"text": "hi"})], **kw)


def init_world(ctx: Ctx, cmd: list[str], expect: tuple[int, ...] = (1,), name: str = "drafted",
               extra: list[str] | None = None, **kw: Any) -> Run:
    return Run(["init-world", "--timeout", "5", *(extra or []), name, "--", *cmd], ctx.work, expect=expect, **kw)


def import_mcp(ctx: Ctx, cmd: str, expect: tuple[int, ...] = (2,), **kw: Any) -> Run:
    return Run(["catalog", "import-mcp", "--cmd", cmd, "--out", str(ctx.work / "cat.json"), "--timeout", "15"],
               ctx.work, expect=expect, **kw)


def import_cmd(ctx: Ctx, modes: str) -> str:
    return f"{PY} {SERVER} {ctx.mark} {modes or 'none'}"


# -- extra checks ----------------------------------------------------------------------------------------------


def failures_name_world(ctx: Ctx, res: Result) -> list[str]:
    """run: every failed tuple's record names the world (not a bare Python exception)."""
    f = ctx.work / "out" / "failures.jsonl"
    if not f.exists():
        return []
    bad = []
    for line in f.read_text(errors="replace").splitlines():
        try:
            msg = str(json.loads(line).get("message", ""))
        except ValueError:
            bad.append("failures.jsonl holds a line that is not JSON")
            continue
        if "world 'h'" not in msg:
            bad.append(f"failures.jsonl message names no world: {msg[:120]!r}")
    return bad[:1]


def draft_loads(ctx: Ctx, res: Result) -> list[str]:
    """init-world that succeeded: its draft is valid TOML that loads as a world (`validate` of it exits 0)."""
    if res.rc != 0:
        return []
    drafts = list((ctx.work / "worlds").glob("*/world.toml"))
    if not drafts:
        return ["init-world exited 0 but wrote no draft under ./worlds"]
    done = subprocess.run(["nice", "-n", "10", str(AFT), "validate", str(drafts[0].parent)], cwd=ctx.work,
                          capture_output=True, text=True, env={**os.environ, "TMPDIR": str(ctx.tmp)}, timeout=120)
    if done.returncode != 0:
        return [f"its draft does not load: {last_line(done.stderr)[:160]}"]
    return []


def nothing_escaped(ctx: Ctx, res: Result) -> list[str]:
    """init-world with a name that leaves --worlds: nothing written beside the case's folders."""
    extra = [p.name for p in ctx.dir.iterdir() if p.name not in ("tmp", "work", "outside", "state", "benign")]
    extra += [p.name for p in ctx.work.iterdir() if p.name not in ("worlds", "card", "out", "served", "cfg.toml",
                                                                   "cat.json", "srv", "rel")]
    return [f"wrote outside the worlds folder: {extra}"] if extra else []


def nothing_written(ctx: Ctx, res: Result) -> list[str]:
    """bad input or a failed command: no draft, card or catalog left in its working folder."""
    made = sorted(str(Path(p).relative_to(ctx.work)) for p in files_state(ctx.work) if p not in ctx.before)
    made += sorted(str(p.relative_to(ctx.work)) + "/" for p in ctx.work.rglob("*") if p.is_dir() and not any(
        p.iterdir()) and str(p) not in ctx.before_dirs)
    return [f"left {made[:3]} after failing"] if made and res.rc not in (0, None) else []


def catalog_reloads(ctx: Ctx, res: Result) -> list[str]:
    """catalog import-mcp that succeeded: the catalog it wrote can be read back (`validate` of it exits 0)."""
    cat = ctx.work / "cat.json"
    if res.rc != 0 or not cat.exists():
        return []
    done = subprocess.run(["nice", "-n", "10", str(AFT), "validate", str(cat)], cwd=ctx.work, capture_output=True,
                          text=True, env={**os.environ, "TMPDIR": str(ctx.tmp)}, timeout=120)
    return [] if done.returncode == 0 else [f"the catalog it wrote does not load: {last_line(done.stderr)[:160]}"]


def no_other_host(ctx: Ctx, res: Result) -> list[str]:
    """A url naming 127.0.0.1 only before a '@': nothing may reach the host after it."""
    if ctx.listener is not None and ctx.listener.hits:
        return [f"posted to a host other than 127.0.0.1 ({ctx.listener.hits} connection(s) to 127.0.0.2)"]
    return []


def card_written(ctx: Ctx, res: Result) -> list[str]:
    if res.rc == 0 and not list((ctx.work / "card").glob("*.json")):
        return ["exited 0 without writing the card"]
    return []


class Listener:
    """A TCP listener on 127.0.0.2 that counts connections (a request that should never reach it)."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.2", 0))
        self.sock.listen(8)
        self.port = self.sock.getsockname()[1]
        self.hits = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.hits += 1
            conn.close()

    def close(self) -> None:
        self.sock.close()


# ---------------------------------------------------------------------------------------------------------------
# the cases

CASES: list[Case] = []


def case(cid: str, group: str, surface: str, build: Callable[[Ctx], Run], names: tuple[str, ...] = (),
         new: bool = False, **kw: Any) -> None:
    CASES.append(Case(cid, group, surface, build, names, new, **kw))


W = ("world 'h'",)  # what a line about the hostile world names
FAIL = ("failures.jsonl",)  # run's last line names the failure record (each record names the world: checked)
IW = ("init-world", "NAME", "--timeout", "--worlds", "--into", "world.toml", "COMMAND")
CMD = ("--cmd",)
RUN_CHECKS = (failures_name_world,)
SWEEP = lambda ctx: validate(ctx, ctx.benign(), expect=(0,))  # noqa: E731 - the next command after a SIGKILL


def surfaces_open(prefix: str, group: str, modes: str, new: bool = False, only: tuple[str, ...] = (),
                  init: bool = True, imp: bool = True) -> None:
    """A server broken before any tool is called: at scorecard (2), run (1), serve (1), init-world (1), import (2)."""
    todo = only or ("scorecard", "run", "serve", "init-world", "import-mcp")
    if "scorecard" in todo:
        case(f"{prefix}.scorecard", group, "scorecard", lambda c: scorecard(c, c.world(modes), (2,)), W, new)
    if "validate" in todo:
        case(f"{prefix}.validate", group, "validate --live", lambda c: validate(c, c.world(modes)), W, new)
    if "run" in todo:
        case(f"{prefix}.run", group, "run", lambda c: (c.world(modes), run_cmd(c))[1], FAIL, new,
             checks=RUN_CHECKS)
    if "serve" in todo:
        case(f"{prefix}.serve", group, "serve", lambda c: (c.world(modes), serve_cmd(c))[1], W, new)
    if "init-world" in todo and init:
        case(f"{prefix}.init-world", group, "init-world", lambda c: init_world(c, c.server_cmd(modes)), IW, new,
             checks=(nothing_written,))
    if "import-mcp" in todo and imp:  # the SDK's client reads the answer: a lawful-enough one may be imported
        case(f"{prefix}.import-mcp", group, "catalog import-mcp", lambda c: import_mcp(
            c, import_cmd(c, modes), (0, 2)), CMD, new, checks=(nothing_written, catalog_reloads))


def surfaces_call(prefix: str, group: str, modes: str, expect_ok: bool = False, new: bool = False,
                  only: tuple[str, ...] = ()) -> None:
    """A server that breaks (or answers oddly) when a tool is called: scorecard (1), validate --live (2), run (1),
    serve (1). `expect_ok`: an odd but lawful answer, where 0 is right and a one-line failure is accepted."""
    todo = only or ("scorecard", "validate", "run", "serve")
    ok = (0,) if expect_ok else ()
    if "scorecard" in todo:
        case(f"{prefix}.scorecard", group, "scorecard",
             lambda c: scorecard(c, c.world(modes), ok + (1,)), W, new, checks=(card_written,))
    if "validate" in todo:
        case(f"{prefix}.validate", group, "validate --live", lambda c: validate(c, c.world(modes), ok + (2,)), W, new)
    if "run" in todo:
        case(f"{prefix}.run", group, "run", lambda c: (c.world(modes), run_cmd(c, ok + (1,)))[1], FAIL, new,
             checks=RUN_CHECKS)
    if "serve" in todo:
        case(f"{prefix}.serve", group, "serve", lambda c: (c.world(modes), serve_cmd(c, ok + (1,)))[1], W, new)


def build_cases() -> None:  # noqa: PLR0915 - one long list, read top to bottom
    # == 1. the probe reads outside the resource ==============================================================
    g = "probe-path"
    case("probe.abs-folder", g, "scorecard", lambda c: scorecard(c, c.world(probe='builtin = "folder"\npath = "/etc"'),
                                                                   (2,)), ("path",))
    case("probe.abs-jsonl", g, "validate --live", lambda c: validate(c, c.world(
        probe=f'builtin = "jsonl"\npath = {tstr(str(c.outside / "memory.jsonl"))}')), ("path",))
    case("probe.dotdot", g, "scorecard", lambda c: scorecard(c, c.world(
        probe='builtin = "folder"\npath = "../../outside"'), (2,)), ("path",))
    case("probe.dotdot-middle", g, "run", lambda c: (c.world(probe='builtin = "sqlite"\npath = "data/../../app.db"'),
                                                     run_cmd(c, (2,)))[1], ("path",))
    case("probe.brace-root", g, "validate --live", lambda c: validate(c, c.world(
        probe='builtin = "folder"\npath = "{root}/../x"')), ("path",))
    case("probe.symlink-jsonl-graph", g, "scorecard", lambda c: scorecard(c, c.world(
        f"plant-symlink=memory.jsonl>{c.outside / 'memory.jsonl'}", probe='builtin = "jsonl_graph"\npath = '
        '"memory.jsonl"'), (1,)), W)
    case("probe.symlink-sqlite-s0", g, "validate --live", lambda c: validate(c, c.world(
        f"at=start,plant-symlink=app.db>{c.outside / 'app.db'}", probe='builtin = "sqlite"\npath = "app.db"')), W)
    case("probe.symlink-file-run", g, "run", lambda c: (c.world(
        f"plant-symlink=todo.txt>{c.outside / 'secret.txt'}", probe='builtin = "folder"\npath = "todo.txt"'),
        run_cmd(c))[1], FAIL, checks=RUN_CHECKS)
    case("probe.symlink-folder-walk", g, "scorecard", lambda c: scorecard(c, c.world(
        f"plant-symlink=link.txt>{c.outside / 'secret.txt'}"), (0,)), W, checks=(card_written,))
    case("probe.symlink-git", g, "run", lambda c: (c.git_world(f"plant-symlink=link.txt>{c.outside / 'secret.txt'}"),
                                                   run_cmd(c, (0,)))[1], FAIL, checks=RUN_CHECKS)
    case("probe.symlink-etc-passwd", g, "serve", lambda c: (c.world(
        "plant-symlink=memory.jsonl>/etc/passwd", probe='builtin = "jsonl"\npath = "memory.jsonl"'),
        serve_cmd(c))[1], W, secrets=("root:x:0:0",))
    case("probe.symlink-dir", g, "scorecard", lambda c: scorecard(c, c.world(
        f"plant-dirlink=data>{c.outside}", probe='builtin = "jsonl_graph"\npath = "data/memory.jsonl"',
        fixture='\n[fixture]\nfiles = { "data/memory.jsonl" = "" }\n'), (1,)), W)
    case("probe.symlink-chain", g, "run", lambda c: (c.world(
        f"plant-symlink=b.jsonl>{c.outside / 'memory.jsonl'},plant-dirlink=a.jsonl>b.jsonl",
        probe='builtin = "jsonl"\npath = "a.jsonl"'), run_cmd(c))[1], FAIL, checks=RUN_CHECKS)
    # new: the resource itself replaced, git's own ways of reading elsewhere or running commands
    case("probe.root-replaced-by-symlink", g, "run", lambda c: (c.world(f"replace-root={c.outside}"),
                                                                run_cmd(c, (0, 1)))[1], FAIL, True,
         checks=RUN_CHECKS, note="the server replaces its resource folder by a symlink to a folder of the user's")
    case("probe.root-replaced-git", g, "scorecard", lambda c: scorecard(c, c.git_world(f"replace-root={c.repo}"),
                                                                        (0, 1)), W, True)
    case("probe.gitfile-outside", g, "run", lambda c: (c.git_world(f"git=gitfile,outside-git={c.repo / '.git'}"),
                                                       run_cmd(c, (0, 1)))[1], FAIL, True, checks=RUN_CHECKS,
         note="the server makes .git a file: gitdir pointing at a repository outside")
    case("probe.git-worktree-outside", g, "run", lambda c: (c.git_world(f"git=worktree,outside-dir={c.outside}"),
                                                            run_cmd(c, (0, 1)))[1], FAIL, True, checks=RUN_CHECKS)
    case("probe.git-fsmonitor-run", g, "run", lambda c: (c.git_world("git=fsmonitor"), run_cmd(c, (0, 1)))[1],
         FAIL, True, checks=RUN_CHECKS, note="core.fsmonitor planted in .git/config: the probe's git runs it")
    case("probe.git-fsmonitor-scorecard", g, "scorecard", lambda c: scorecard(c, c.git_world("git=fsmonitor"),
                                                                             (0, 1)), W, True)
    case("probe.symlink-loop", g, "scorecard", lambda c: scorecard(c, c.git_world("git=symlink-loop"), (0,)), W,
         True)
    case("probe.fifo-jsonl", g, "scorecard", lambda c: scorecard(c, c.world(
        "plant-fifo=log.jsonl", probe='builtin = "jsonl"\npath = "log.jsonl"'), (1,)), W, True)
    case("probe.fifo-folder-walk", g, "scorecard", lambda c: scorecard(c, c.world("plant-fifo=pipe"), (0,)), W,
         True)
    case("probe.fifo-sqlite-s0", g, "validate --live", lambda c: validate(c, c.world(
        "at=start,plant-fifo=app.db", probe='builtin = "sqlite"\npath = "app.db"')), W, True)
    case("probe.device-jsonl", g, "scorecard", lambda c: scorecard(c, c.world(
        "plant-device=log.jsonl", probe='builtin = "jsonl"\npath = "log.jsonl"'), (1,), limit_as=6 * GB), W, True,
         note="a character device like /dev/zero made in the resource; run under a 6 GB address-space limit")
    case("probe.device-folder-walk", g, "run", lambda c: (c.world("plant-device=zero"), run_cmd(c, (0,)))[1], FAIL,
         True, checks=RUN_CHECKS)
    case("probe.file-becomes-dir", g, "scorecard", lambda c: scorecard(c, c.world(
        "plant-dir=log.jsonl", probe='builtin = "jsonl"\npath = "log.jsonl"'), (1,)), W, True)
    case("probe.file-becomes-dir-sqlite", g, "run", lambda c: (c.world(
        "plant-dir=app.db", probe='builtin = "sqlite"\npath = "app.db"'), run_cmd(c))[1], FAIL, True,
         checks=RUN_CHECKS)
    case("probe.named-file-becomes-dir", g, "scorecard", lambda c: scorecard(c, c.world(
        "plant-dir=todo.txt", probe='builtin = "folder"\npath = "todo.txt"'), (0, 1)), W, True)
    case("probe.sparse-2GB-file", g, "run", lambda c: (c.world("plant-sparse=big.bin>2"),
                                                      run_cmd(c, (0, 1), limit_as=8 * GB))[1], FAIL, True,
         checks=RUN_CHECKS, note="a 2 GB sparse file in the folder the probe walks (8 GB address-space limit)")
    case("probe.resource-removed-folder", g, "scorecard", lambda c: scorecard(c, c.world("remove-root"), (1,)), W,
         True)
    case("probe.resource-removed-git", g, "run", lambda c: (c.git_world("remove-root"), run_cmd(c))[1], FAIL, True,
         checks=RUN_CHECKS)
    case("probe.resource-unreadable", g, "scorecard", lambda c: scorecard(c, c.world("chmod-root"), (0, 1)), W, True,
         note="chmod 000 of the resource (this probe runs as root, so it stays readable)")

    # == 2. servers outlive their runner ======================================================================
    g = "escape"
    case("escape.direct-scorecard", g, "scorecard", lambda c: scorecard(c, c.world("escape"), (0,)), W)
    case("escape.sh-c-run", g, "run", lambda c: (c.world(command=["sh", "-c", " ".join(c.server_cmd("escape"))]),
                                                 run_cmd(c, (0,)))[1], FAIL, checks=RUN_CHECKS)
    case("escape.sigkill-run", g, "run", lambda c: (c.world("escape,slow-first=60"),
                                                    run_cmd(c, (-9,), signals=[(9, "marked:4", 1)]))[1], FAIL,
         after=lambda c: run_cmd(c, (0,)))
    case("escape.sh-c-sigkill-scorecard", g, "scorecard", lambda c: scorecard(c, c.world(
        command=["sh", "-c", " ".join(c.server_cmd("escape,slow=60"))]), (-9,), signals=[(9, "marked:4", 1)]), W,
         after=SWEEP)
    case("escape.sigterm-validate", g, "validate --live", lambda c: validate(c, c.world("escape,slow=60"), (130,),
                                                                            signals=[(15, "marked:4", 1)]),
         ("interrupted",))
    case("escape.sigterm-init-world", g, "init-world", lambda c: init_world(
        c, c.server_cmd("escape,at=list,slow=60,slow-on=tools/list"), (130,), extra=["--timeout", "100"],
        signals=[(15, "marked:4", 1)]), ("interrupted",))
    case("escape.sigkill-serve", g, "serve", lambda c: (c.world("escape,slow=60"), serve_cmd(
        c, (-9,), signals=[(9, "marked:4", 1)]))[1], W, after=SWEEP)
    case("escape.import-normal-end", g, "catalog import-mcp", lambda c: import_mcp(
        c, import_cmd(c, "escape,at=list"), (0,)), CMD)
    case("escape.sigterm-import", g, "catalog import-mcp", lambda c: import_mcp(
        c, import_cmd(c, "slow=60,slow-on=tools/list"), (130, 2, -15), signals=[(15, "marked:1", 1)]),
         ("interrupted", "--cmd"))
    case("escape.sigkill-import", g, "catalog import-mcp", lambda c: import_mcp(
        c, import_cmd(c, "slow=60,slow-on=tools/list"), (-9,), signals=[(9, "marked:1", 1)]), CMD)
    case("escape.sigkill-import-ignores-term", g, "catalog import-mcp", lambda c: import_mcp(
        c, import_cmd(c, "ignore-term,slow=60,slow-on=tools/list"), (-9,), signals=[(9, "marked:1", 1)]), CMD, True,
         note="the server ignores SIGTERM (import's die-with-parent signal)")
    case("escape.import-escaping-sigterm", g, "catalog import-mcp", lambda c: import_mcp(
        c, import_cmd(c, "escape,at=list,slow=60,slow-on=tools/list"), (130, 2, -15),
        signals=[(15, "marked:4", 1)]), ("interrupted", "--cmd"), True)
    case("escape.hold-stdout", g, "scorecard", lambda c: scorecard(c, c.world("hold-stdout"), (1,)), W, True,
         note="at the call, a child keeps stdout open and the server exits")
    case("escape.close-stdout", g, "validate --live", lambda c: validate(c, c.world("at=init,close-stdout")), W, True)
    case("escape.exec-sleep", g, "scorecard", lambda c: scorecard(c, c.world("at=init,exec-sleep"), (2,)), W, True)
    case("escape.linger-ignore-term", g, "run", lambda c: (c.world("linger,ignore-term"), run_cmd(c, (0,)))[1], FAIL,
         True, checks=RUN_CHECKS, note="after stdin closes the server stays on, ignoring SIGTERM")
    case("escape.server-sigterms-runner", g, "scorecard", lambda c: scorecard(c, c.world("kill-runner=SIGTERM"),
                                                                              (0, 130)), ("interrupted",), True,
         note="the server looks its runner up in /proc and signals it (from inside its PID namespace it cannot)")
    case("escape.server-sigkills-runner", g, "run", lambda c: (c.world("kill-runner=SIGKILL,escape"),
                                                               run_cmd(c, (0, -9)))[1], FAIL, True, after=SWEEP)
    case("escape.sigstop-self", g, "scorecard", lambda c: scorecard(c, c.world("sigstop"), (1,)), W, True)
    case("escape.forked-launcher-sigkill", g, "scorecard", lambda c: scorecard(c, c.world(
        "escape,slow=60", command=[PY, str(ECHO)], env={"ECHO_ESCAPE": "600", "ECHO_SLEEP": "60",
                                                         "PYTHONPATH": str(ECHO.parent)},
        server_extra=f'[server.fork]\npython = {tstr(PY)}\nentry = "forkable_echo:main"\n'), (-9,),
        env={"AFT_BENCH_FORK": "1", "PYTHONPATH": str(ECHO.parent)}, signals=[(9, "marked:1", 3)]), W, True,
        after=SWEEP,
         note="echo server forked by the launcher, its setsid'd escapees; the mark is in their environment")

    # == 3. secrets ===========================================================================================
    g = "secret"
    case("secret.stderr-exit.scorecard", g, "scorecard", lambda c: scorecard(c, c.world("stderr-secret,crash=5,at=start"),
                                                                              (2,)), W)
    case("secret.stderr-exit.validate", g, "validate --live", lambda c: validate(c, c.world(
        "stderr-secret,crash=5,at=start")), W)
    case("secret.stderr-exit.init-world", g, "init-world", lambda c: init_world(c, c.server_cmd(
        "stderr-secret,crash=5,at=start")), IW)
    case("secret.stderr-exit.run", g, "run", lambda c: (c.world("stderr-secret,crash=5,at=start"), run_cmd(c))[1],
         FAIL, checks=RUN_CHECKS)
    case("secret.stderr-exit.serve", g, "serve", lambda c: (c.world("stderr-secret,crash=5,at=start"),
                                                            serve_cmd(c))[1], W)
    case("secret.stderr-exit.import", g, "catalog import-mcp", lambda c: import_mcp(c, import_cmd(
        c, "stderr-secret,crash=5,at=start")), CMD)
    case("secret.crash-at-call.scorecard", g, "scorecard", lambda c: scorecard(c, c.world("crash"), (1,)), W)
    case("secret.crash-at-call.run", g, "run", lambda c: (c.world("crash"), run_cmd(c))[1], FAIL, checks=RUN_CHECKS)
    case("secret.stderr-working-server", g, "scorecard", lambda c: Run(
        ["scorecard", str(c.world("stderr-secret")), "--out", str(c.work / "card")], c.work), W)
    case("secret.answer.scorecard", g, "scorecard", lambda c: scorecard(c, c.world("secret-answer"), (0,)), W, True,
         checks=(card_written,))
    case("secret.answer.run", g, "run", lambda c: (c.world("secret-answer"), run_cmd(c, (0,)))[1], FAIL, True,
         checks=RUN_CHECKS)
    case("secret.answer.serve", g, "serve", lambda c: (c.world("secret-answer"), serve_cmd(c, (0,)))[1], W, True)
    case("secret.description.init-world", g, "init-world", lambda c: init_world(c, c.server_cmd("secret-desc"), (0,)),
         IW, True, checks=(draft_loads,))
    case("secret.description.import", g, "catalog import-mcp", lambda c: import_mcp(c, import_cmd(c, "secret-desc"),
                                                                                   (0,)), CMD, True,
         checks=(catalog_reloads,))
    case("secret.server-info.scorecard", g, "scorecard", lambda c: scorecard(c, c.world("secret-info"), (0,)), W, True)
    case("secret.server-info.init-world", g, "init-world", lambda c: init_world(c, c.server_cmd("secret-info"), (0,)),
         IW, True, checks=(draft_loads,))
    case("secret.server-info.run", g, "run", lambda c: (c.world("secret-info"), run_cmd(c, (0,)))[1], FAIL, True)
    case("secret.file-in-resource.run", g, "run", lambda c: (c.world("secret-file"), run_cmd(c, (0,)))[1], FAIL, True)
    case("secret.file-in-resource.scorecard", g, "scorecard", lambda c: scorecard(c, c.world("secret-file"), (0,)),
         W, True)
    case("secret.rpc-error-message", g, "scorecard", lambda c: scorecard(c, c.world("error-secret"), (0, 1)), W, True)
    case("secret.tool-named-like-a-key", g, "catalog import-mcp", lambda c: import_mcp(c, import_cmd(
        c, "secret-name"), (0,)), CMD, True, checks=(catalog_reloads,))
    case("secret.http-500-body-measuring", g, "scorecard", lambda c: scorecard(c, c.http_world("status500-call"),
                                                                               (1,)), W, True)
    case("secret.http-500-body-open", g, "validate --live", lambda c: validate(c, c.http_world("status500")), W, True)
    case("secret.http-500-body-run", g, "run", lambda c: (c.http_world("status500-call"), run_cmd(c))[1], FAIL, True,
         checks=RUN_CHECKS)
    case("secret.http-session-id", g, "run", lambda c: (c.http_world("session-secret"), run_cmd(c, (0, 1)))[1], FAIL,
         True)
    case("secret.env-value-echoed", g, "run", lambda c: (c.world(
        "env-answer", fixture=f'\n[fixture]\nenv = {{ OPENAI_API_KEY = {tstr(CANARY)} }}\n'),
        run_cmd(c, (0,)))[1], FAIL, True,
         note="the key given to the server in the world's fixture.env; the server answers with its environment")
    case("secret.fixture-command-stderr", g, "validate --live", lambda c: validate(c, c.world(
        fixture=f'\n[fixture]\ncommands = [["sh", "-c", "echo token {CANARY} refused >&2; exit 3"]]\n')),
         ("fixture",), True)
    case("secret.probe-command-stderr", g, "scorecard", lambda c: scorecard(c, c.world(
        probe=f'command = ["sh", "-c", "echo db password {CANARY} >&2; exit 4"]'), (2,)), ("probe",), True)
    case("secret.value-only-in-env", g, "scorecard", lambda c: scorecard(c, c.world(
        command=[PY, "-c", CRASH_ENV, c.mark]), (2,), env={"MY_SERVICE_TOKEN": "zz-privatevalue-" + c.mark}), W, True,
         secrets=("zz-privatevalue-",), note="a credential with no key shape, known only as an env var's value")

    # == 4. malformed answers =================================================================================
    g = "malformed"
    for mode, new in (("info-string", False), ("info-list", True), ("info-null", True), ("protocol-number", True),
                      ("tools-strings", False), ("tools-number", False), ("tools-null", True), ("tools-object", True),
                      ("tool-noname", True), ("tool-name-number", True), ("dup-tools", False),
                      ("annotations-string", False), ("annotations-list", True), ("annotation-values", False),
                      ("schema-invalid", False), ("schema-string", True), ("deep=tools/list", False),
                      ("cursor-loop", True), ("cursor-number", True), ("huge-list", False),
                      ("nonutf8=tools/list", False), ("wrong-id", False), ("id-string", True), ("id-null", True),
                      ("batch=tools/list", True)):
        slug = mode.split("=")[0]
        only = ("scorecard", "run", "serve", "init-world", "import-mcp")
        if slug in ("wrong-id", "id-string", "id-null", "batch", "cursor-loop"):
            only = ("scorecard", "run", "init-world")  # each waits out a timeout: fewer surfaces
        surfaces_open(f"open.{slug}", g, mode, new, only)
    surfaces_open("open.deep-initialize", g, "deep=initialize", False, ("validate", "run"))
    for mode, ok, new in (("error-code-string", False, False), ("error-code-null", False, False),
                          ("error-code-float", False, True), ("error-code-bool", False, True),
                          ("error-code-missing", False, True), ("error-string", False, True),
                          ("error-message-object", False, True), ("content-string", False, False),
                          ("content-strings", False, True), ("iserror-string", False, True),
                          ("result-list", False, False), ("result-null", False, True), ("deep=tools/call", False, False),
                          ("nonutf8=tools/call", False, False), ("nan-answer", True, True), ("bigint-answer", True, True),
                          ("huge-call", True, False), ("surrogate-answer", True, True), ("deep-struct=900", True, True),
                          ("block-kinds", True, True), ("image-answer", True, True)):
        slug = mode.split("=")[0]
        surfaces_call(f"call.{slug}", g, mode, ok, new, () if not ok else ("scorecard", "run", "serve"))
    case("malformed.notif-flood", g, "scorecard", lambda c: scorecard(c, c.world("notif-flood=100000"), (0,)), W)
    case("malformed.notif-flood.run", g, "run", lambda c: (c.world("notif-flood=100000"), run_cmd(c, (0,)))[1], FAIL)
    case("malformed.huge-line-100MB", g, "scorecard", lambda c: scorecard(c, c.world("huge-line=100"), (0, 2)), W, True,
         note="one 100 MB line of stdout that is not JSON, before the tools/list answer")
    case("malformed.schema-ref-loop", g, "scorecard", lambda c: scorecard(c, c.world("schema-ref-loop"), (0, 2)), W,
         True, note='inputSchema {"$ref": "#"}')
    case("malformed.schema-ref-loop.init-world", g, "init-world", lambda c: init_world(
        c, c.server_cmd("schema-ref-loop"), (0, 1)), IW, True, checks=(draft_loads,))
    case("malformed.schema-deep", g, "validate --live", lambda c: validate(c, c.world("schema-deep=3000"), (0, 2)), W,
         True)
    case("malformed.schema-bad-regex", g, "scorecard", lambda c: scorecard(c, c.world("schema-bad-regex"), (0, 2)), W,
         True, note='a "pattern" that is not a regular expression')
    case("malformed.schema-redos", g, "validate --live", lambda c: validate(c, Path(str(c.world(
        "schema-regex", tools='[tools.echo]\neffect = "read"\n[tools.append]\neffect = "write"\n'
        'examples = [{ args = { text = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaab" } }]\n'))), (0, 2)), W, True,
         note="a pattern with catastrophic backtracking, against an example's argument (the harness matches no "
         "server's pattern, so accepting the example is clean too; hanging is not)")

    # == 5. init-world =========================================================================================
    g = "init-world"
    for cid, name, new in (("name-dotdot", "../escape", False), ("name-slash", "a/b", False), ("name-dot", ".", False),
                           ("name-dots", "...", False), ("name-empty", "", False), ("name-emoji", "w😀", False),
                           ("name-space", "my world", True), ("name-umlaut", "wörld", True),
                           ("name-newline", "a\nb", True), ("name-dash", "-x", True), ("name-300", "n" * 300, True)):
        exp = (2,)
        case(f"init.{cid}", g, "init-world", lambda c, name=name, exp=exp: init_world(
            c, c.server_cmd(""), exp, name=name), IW + (("-x",) if name == "-x" else ()), new,
             checks=(nothing_escaped, nothing_written))
    for cid, val, new in (("nan", "nan", False), ("minus1", "-1", False), ("inf", "inf", False), ("zero", "0", True),
                          ("1e309", "1e309", True), ("empty", "", True), ("word", "soon", True), ("601", "601", True)):
        case(f"init.timeout-{cid}", g, "init-world", lambda c, val=val: Run(
            ["init-world", "--timeout", val, "drafted", "--", *c.server_cmd("")], c.work, expect=(2,)), ("--timeout",),
             new, checks=(nothing_written,))
    case("init.options-between-name-and-command", g, "init-world", lambda c: Run(
        ["init-world", "drafted", "--timeout", "30", "--", *c.server_cmd("")], c.work), IW, True,
         checks=(draft_loads,), note="`init-world NAME --timeout 30 -- COMMAND`, options after the name")
    case("init.no-command", g, "init-world", lambda c: Run(["init-world", "drafted", "--"], c.work, expect=(2,)),
         ("COMMAND",), checks=(nothing_written,))
    case("init.not-mcp", g, "init-world", lambda c: init_world(c, c.server_cmd("not-mcp")), IW, checks=(nothing_written,))
    case("init.no-such-program", g, "init-world", lambda c: init_world(c, ["/nonexistent/server", c.mark]), IW, True,
         checks=(nothing_written,))
    case("init.worlds-is-a-file", g, "init-world", lambda c: (c.work.joinpath("afile").write_text("x"), init_world(
        c, c.server_cmd(""), (1, 2), extra=["--worlds", str(c.work / "afile")]))[1], ("--worlds", "afile"), True)
    case("init.into-is-a-file", g, "init-world", lambda c: (c.work.joinpath("afile").write_text("x"), init_world(
        c, c.server_cmd(""), (1, 2), extra=["--into", str(c.work / "afile")]))[1], ("--into", "afile"), True)
    case("init.world-exists", g, "init-world", lambda c: (c.world(folder="drafted", workload=False), init_world(
        c, c.server_cmd(""), (2,)))[1], ("already exists",), True)
    case("init.unicode-tools", g, "init-world", lambda c: init_world(c, c.server_cmd("tools-json"), (0,), env={
        "HOSTILE_TOOLS": json.dumps([{"name": 'smile 😀 "q" \\ d', "inputSchema": {"type": "object", "properties": {
            "q": {"type": "string"}}, "required": ["q"]}}, {"name": "x\u200by\u202ez", "inputSchema": {}}])}), IW,
         checks=(draft_loads,))
    for cid, mode in (("newline-tool-name", "newline-name"), ("surrogate-tool-name", "surrogate-name"),
                      ("100k-tool-name", "long-name"), ("odd-property-names", "odd-props"),
                      ("type-unions-refs", "type-union"), ("20000-tools", "many-tools=20000"),
                      ("no-tools", "tools-empty"), ("server-info-newline", "info-newline"),
                      ("server-info-surrogate", "info-surrogate"), ("server-info-10MB", "info-huge"),
                      ("noargs-write-measured", "noargs-write"), ("early-answer", "early-answer"),
                      ("banner-on-stdout", "banner"), ("requests-to-client", "request-client")):
        # a lone surrogate cannot be written into a UTF-8 draft: refusing the answer in one line is clean too
        exp = (0, 1) if mode in ("tools-empty", "long-name", "info-huge", "surrogate-name", "info-surrogate") else (0,)
        case(f"init.{cid}", g, "init-world", lambda c, mode=mode, exp=exp: init_world(c, c.server_cmd(mode), exp), IW,
             True, checks=(draft_loads, nothing_escaped))
    case("init.dup-tools", g, "init-world", lambda c: init_world(c, c.server_cmd("dup-tools")), IW,
         checks=(nothing_written,))

    # == 6. signals ==============================================================================================
    g = "signals"
    slow = "slow=60"
    for sig, sname, exp in ((15, "sigterm", (130,)), (9, "sigkill", (-9,))):
        after = SWEEP if sig == 9 else None
        names = ("interrupted",) if sig == 15 else W
        case(f"sig.{sname}-scorecard", g, "scorecard", lambda c, sig=sig, exp=exp: scorecard(
            c, c.world(slow), exp, signals=[(sig, "starts:2", 1.5)]), names, after=after)
        case(f"sig.{sname}-validate", g, "validate --live", lambda c, sig=sig, exp=exp: validate(
            c, c.world(slow), exp, signals=[(sig, "starts:2", 1.5)]), names, after=after)
        case(f"sig.{sname}-init-world", g, "init-world", lambda c, sig=sig, exp=exp: init_world(
            c, c.server_cmd("slow=60,slow-on=tools/list"), exp, extra=["--timeout", "100"],
            signals=[(sig, "marked:1", 1)]), names, after=after)
        case(f"sig.{sname}-run", g, "run", lambda c, sig=sig: (c.world("slow-first=60"), run_cmd(
            c, (-sig, 130, 128 + sig), signals=[(sig, "marked:1", 1)]))[1], ("interrupted",) + FAIL,
             after=lambda c: run_cmd(c, (0,)))
        case(f"sig.{sname}-serve", g, "serve", lambda c, sig=sig: (c.world(slow), serve_cmd(
            c, (0, 1, 130, -sig), signals=[(sig, "marked:1", 1)]))[1], W + ("recorded",), sig == 15,
             after=after)
    case("sig.sigint-validate", g, "validate --live", lambda c: validate(c, c.world(slow), (130,), signals=[
        (2, "marked:1", 1)]), ("interrupted",), True)
    case("sig.sighup-scorecard", g, "scorecard", lambda c: scorecard(c, c.world(slow), (-1, 130, 129), signals=[
        (1, "marked:1", 1)]), ("interrupted",), True, after=SWEEP, note="the terminal closed")
    case("sig.sigusr1-scorecard", g, "scorecard", lambda c: scorecard(c, c.world(slow), (-10, 130), signals=[
        (10, "marked:1", 1)]), ("interrupted",), True, after=SWEEP)
    case("sig.double-sigterm-scorecard", g, "scorecard", lambda c: scorecard(c, c.world(slow), (130,), signals=[
        (15, "marked:1", 1), (15, "time:0", 0.05)]), ("interrupted",), True,
         note="a second SIGTERM 50 ms after the first, while it cleans up")
    case("sig.sigterm-init-world-measuring", g, "init-world", lambda c: init_world(
        c, c.server_cmd("slow=60"), (130,), extra=["--timeout", "100"], signals=[(15, "starts:2", 1.5)],
        env={"HOSTILE_STATE": str(c.state)}),
         ("interrupted",), True, checks=(nothing_written,),
         note="SIGTERM while init-world measures a tool with no arguments (its draft already written once)")
    case("sig.sigpipe-stdout-closed", g, "scorecard", lambda c: Run(
        ["scorecard", str(c.world("")), "--quiet"], c.work, expect=(141, 0, -13), stdout_closed=True), W, True)

    # == 7. HTTP servers ========================================================================================
    g = "http"
    case("http.endless-stream", g, "scorecard", lambda c: scorecard(c, c.http_world("endless", old=True), (2,)), W)
    case("http.300MB-body", g, "scorecard", lambda c: scorecard(c, c.http_world("huge", old=True), (2,),
                                                                limit_as=3 * GB), W, note="under a 3 GB limit")
    case("http.deep-json", g, "validate --live", lambda c: validate(c, c.http_world("deep")), W)
    case("http.tools-strings", g, "run", lambda c: (c.http_world("tools-strings"), run_cmd(c))[1], FAIL,
         checks=RUN_CHECKS)
    for mode, surface in (("silent", "validate"), ("drip", "scorecard"), ("html", "validate"), ("redirect", "validate"),
                          ("gzip-bomb", "scorecard"), ("length-lie", "validate"), ("reset", "scorecard"),
                          ("reset-call", "scorecard"), ("reset-call", "run"), ("bad-chunked", "validate"),
                          ("event-nonjson", "validate"), ("event-hugeline", "scorecard"),
                          ("session-huge", "scorecard"), ("wrong-ctype", "validate")):
        during = mode.endswith("-call")
        if surface == "run":
            case(f"http.{mode}.run", g, "run", lambda c, mode=mode: (c.http_world(mode), run_cmd(c))[1], FAIL, True,
                 checks=RUN_CHECKS)
        elif surface == "scorecard":
            case(f"http.{mode}.scorecard", g, "scorecard", lambda c, mode=mode, during=during: scorecard(
                c, c.http_world(mode), (1,) if during else (2,), limit_as=4 * GB), W, True)
        else:
            case(f"http.{mode}.validate", g, "validate --live", lambda c, mode=mode: validate(
                c, c.http_world(mode), (0, 2) if mode == "wrong-ctype" else (2,)), W, True)

    def userinfo_url(c: Ctx) -> Run:
        c.listener = Listener()
        return validate(c, c.world(kind="mcp_http", url=f"http://127.0.0.1:{{port}}@127.0.0.2:{c.listener.port}/mcp",
                                   command=[PY, str(HTTP), "{port}", "html", c.mark]))
    case("http.url-userinfo-other-host", g, "validate --live", userinfo_url, W + ("url",), True,
         checks=(no_other_host,), note='url = "http://127.0.0.1:{port}@127.0.0.2:N/mcp" passes the 127.0.0.1 rule')

    # == 8. damaged resources ===================================================================================
    g = "damaged"
    graph = 'builtin = "jsonl_graph"\npath = "memory.jsonl"'
    for kind, new, exp in (("notjson", False, (1,)), ("notobject", False, (1,)), ("deep", False, (1,)),
                           ("nonutf8", True, (0,)), ("nul", True, (0, 1)), ("hugeline", True, (0, 1)),
                           ("manylines", True, (0,)), ("garbage", True, (1,)), ("bigint", True, (0, 1)),
                           ("nan", True, (0, 1)), ("dupkeys", True, (0,)), ("surrogate", True, (0, 1))):
        case(f"jsonl.{kind}.scorecard", g, "scorecard", lambda c, kind=kind, exp=exp: scorecard(c, c.world(
            f"plant-bytes=memory.jsonl>{kind}", probe=graph), exp), W + ("memory.jsonl",), new)
        if kind in ("notjson", "deep", "nan", "surrogate", "notobject"):
            case(f"jsonl.{kind}.run", g, "run", lambda c, kind=kind, exp=exp: (c.world(
                f"plant-bytes=memory.jsonl>{kind}", probe=graph), run_cmd(c, exp))[1], FAIL, new, checks=RUN_CHECKS)
        if kind in ("notjson", "nan"):
            case(f"jsonl.{kind}.s0-validate", g, "validate --live", lambda c, kind=kind: validate(c, c.world(
                f"at=start,plant-bytes=memory.jsonl>{kind}", probe=graph), (0, 2) if kind == "nan" else (2,)),
                 W + ("memory.jsonl",), new)
    db = 'builtin = "sqlite"\npath = "app.db"'
    for kind, exp in (("garbage", (1,)), ("sqlite-truncated", (1,))):
        case(f"sqlite.{kind}", g, "scorecard", lambda c, kind=kind, exp=exp: scorecard(c, c.world(
            f"plant-bytes=app.db>{kind}", probe=db), exp), W + ("app.db",))
    for kind, exp in (("lock", (1,)), ("weirdnames", (0,)), ("writable-schema", (0, 1)), ("hugeblob", (0, 1)),
                      ("manyrows", (0,)), ("virtual", (0, 1))):
        case(f"sqlite.{kind}", g, "run", lambda c, kind=kind, exp=exp: (c.world(
            f"sqlite={kind}", probe=db.replace('path = "app.db"', 'path = "app.db"\ntimeout_s = 3')),
            run_cmd(c, exp, limit_as=8 * GB if kind == "hugeblob" else None))[1], FAIL, True, checks=RUN_CHECKS)
    def git_case(kind: str, exp: tuple[int, ...], surface: str, new: bool) -> None:
        def build(c: Ctx) -> Run:
            world = c.git_world(f"git={kind}")
            return run_cmd(c, exp) if surface == "run" else scorecard(c, world, exp)
        case(f"git.{kind}", g, surface, build, FAIL if surface == "run" else W, new,
             checks=RUN_CHECKS if surface == "run" else ())

    for kind, exp in (("head-garbage", (1,)), ("head-traversal", (0, 1)), ("no-objects", (1,)),
                      ("index-garbage", (1,)), ("packed-refs-garbage", (0, 1)), ("rs-message", (0,)),
                      ("huge-message", (0,)), ("odd-branch", (0,)), ("many-files", (0,))):
        git_case(kind, exp, "scorecard" if kind in ("head-garbage", "rs-message") else "run",
                 kind not in ("head-garbage", "no-objects"))

    # == 9. relative paths ======================================================================================
    g = "relative"

    def rel_servers(c: Ctx, surface: str) -> Run:
        (c.work / "srv" / "hostile").mkdir(parents=True)
        shutil.copy(SERVER, c.work / "srv" / "hostile" / "server.py")
        c.world(command=[PY, "{servers}/hostile/server.py", c.mark, ""])
        env = {"AFT_BENCH_SERVERS": "srv"}
        if surface == "run":
            return Run(["run", "cfg.toml", "--out", "out", "--worlds", "worlds", "--workers", "1"], c.work, env=env)
        if surface == "serve":
            return Run(["serve", "--workload", "h_rl", "--task", "t1", "--condition", "GW-bare", "--out", "served",
                        "--worlds", "worlds", "--agent", "probe"], c.work, env=env, expect=(0,),
                       client=[("append", {"text": "hi"})])
        return Run(["scorecard", "worlds/h", "--quiet", "--out", "card"], c.work, env=env)
    case("rel.out-scorecard", g, "scorecard", lambda c: (c.world(), Run(
        ["scorecard", "worlds/h", "--quiet", "--out", "card"], c.work))[1], W, checks=(card_written,))
    case("rel.out-run", g, "run", lambda c: (c.world(), Run(
        ["run", "cfg.toml", "--out", "out", "--worlds", "worlds", "--workers", "1"], c.work))[1], FAIL)
    case("rel.servers-run", g, "run", lambda c: rel_servers(c, "run"), FAIL)
    case("rel.servers-scorecard", g, "scorecard", lambda c: rel_servers(c, "scorecard"), W)
    case("rel.servers-serve", g, "serve", lambda c: rel_servers(c, "serve"), W, True)
    case("rel.validate-relative-world", g, "validate --live", lambda c: (c.world(), Run(
        ["validate", "--live", "worlds/h"], c.work))[1], W)
    case("rel.init-world-relative-command", g, "init-world", lambda c: (
        (c.work / "rel").mkdir(), shutil.copy(SERVER, c.work / "rel" / "server.py"),
        Run(["init-world", "--into", "worlds/drafted", "drafted", "--", PY, "rel/server.py", c.mark], c.work))[2], IW,
         True, checks=(draft_loads,))
    case("rel.out-is-a-file", g, "scorecard", lambda c: (c.world(), c.work.joinpath("card").write_text("x"), Run(
        ["scorecard", "worlds/h", "--quiet", "--out", "card"], c.work, expect=(1, 2)))[2], ("card", "--out"), True)
    case("rel.out-in-unwritable-place", g, "run", lambda c: (c.world(), Run(
        ["run", "cfg.toml", "--out", "/proc/aft-out", "--worlds", "worlds"], c.work, expect=(1, 2)))[1],
         ("/proc/aft-out", "--out"), True)

    # == 10. world.toml fields (new) ===========================================================================
    g = "world.toml"

    def field_case(cid: str, names: tuple[str, ...], exp: tuple[int, ...], make: Callable[[Ctx], Path]) -> None:
        case(f"toml.{cid}", g, "scorecard", lambda c: scorecard(c, make(c), exp), names, True, checks=(nothing_written,)
             if exp == (2,) else ())

    field_case("id-emoji", ("id",), (2,), lambda c: c.world(wid="h😀", workload=False, folder="h"))
    field_case("id-300-chars", ("id",), (0, 2), lambda c: c.world(wid="i" * 300, workload=False, folder="h"))
    field_case("description-10MB", ("description",), (0, 2), lambda c: c.world(top=f'description = "{"d" * 10_000_000}"\n'))
    field_case("command-empty", ("command",), (2,), lambda c: c.world(command=[]))
    field_case("command-empty-string", ("command",) + W, (2,), lambda c: c.world(command=[""]))
    field_case("command-nul", ("command",) + W, (2,), lambda c: c.world(command=[PY, "a\u0000b", c.mark]))
    field_case("command-numbers", ("command",), (2,), lambda c: _edit(c.world(), "command = [", "command = [1, 2, "))
    field_case("command-string", ("command",), (2,), lambda c: _sub(c.world(), r"command = \[.*\]",
                                                                   f'command = "{PY} {SERVER} {c.mark}"'))
    field_case("env-nul", ("env",) + W, (2,), lambda c: c.world(env={"X": "a\u0000b"}))
    field_case("env-key-equals", ("env",) + W, (2,), lambda c: c.world(env={"A=B": "x"}))
    field_case("env-key-empty", ("env",) + W, (0, 2), lambda c: c.world(env={"": "x"}))
    field_case("env-number", ("env",), (0, 2), lambda c: _edit(c.world(), 'HOSTILE_STATE = ', 'N = 5, HOSTILE_STATE = '))
    for fld, val, exp in (("start_timeout_s", "nan", (2,)), ("start_timeout_s", "inf", (2,)),
                          ("start_timeout_s", "-1", (2,)), ("start_timeout_s", "0", (2,)),
                          ("start_timeout_s", '"5"', (0, 2)), ("start_timeout_s", "true", (0, 2)),
                          ("start_timeout_s", "1e308", (2,)), ("call_timeout_s", "1e-9", (1, 2)),
                          ("call_timeout_s", "nan", (2,))):
        field_case(f"{fld}-{val.strip(chr(34))}", (fld,) + W, exp, lambda c, fld=fld, val=val: _sub(
            c.world(), rf"{fld} = .*", f"{fld} = {val}"))
    field_case("probe-timeout-nan", ("timeout_s",), (2,), lambda c: c.world(probe='builtin = "folder"\ntimeout_s = nan'))
    field_case("probe-unknown-builtin", ("builtin",), (2,), lambda c: c.world(probe='builtin = "ftp"'))
    field_case("probe-both", ("probe",), (2,), lambda c: c.world(probe='builtin = "folder"\ncommand = ["true"]'))
    field_case("probe-command-not-json", ("probe",), (2,), lambda c: c.world(probe='command = ["echo", "hello"]'))
    field_case("probe-command-huge-json", ("probe",), (0, 2), lambda c: c.world(
        probe=f'command = [{tstr(PY)}, "-c", "import json; print(json.dumps({{\'records\': {{\'c\': '
              f'{{str(i): {{\'v\': \'x\' * 100}} for i in range(100000)}}}}}}))"]'))
    field_case("fixture-abs-file", ("files",), (2,), lambda c: c.world(fixture='\n[fixture]\nfiles = { "/tmp/x" = "x" }\n'))
    field_case("fixture-empty-name", ("files",), (2,), lambda c: c.world(fixture='\n[fixture]\nfiles = { "" = "x" }\n'))
    field_case("fixture-dotdot", ("files",), (2,), lambda c: c.world(fixture='\n[fixture]\nfiles = { "a/../../b" = "x" }\n'))
    field_case("fixture-empty-command", ("commands",), (2,), lambda c: c.world(fixture='\n[fixture]\ncommands = [[]]\n'))
    field_case("fixture-missing-program", ("fixture",), (2,), lambda c: c.world(
        fixture='\n[fixture]\ncommands = [["/nonexistent/prog"]]\n'))
    field_case("fixture-file-as-dir", ("fixture", "files"), (2,), lambda c: c.world(
        fixture='\n[fixture]\nfiles = { "a" = "x", "a/b" = "y" }\n'))
    field_case("fixture-20MB-file", ("fixture",), (0, 2), lambda c: c.world(
        fixture=f'\n[fixture]\nfiles = {{ "big.txt" = "{"b" * 20_000_000}" }}\n'))
    field_case("tools-empty", ("tools",), (2,), lambda c: c.world(tools="tools = {}\n"))
    field_case("tool-effect-odd", ("effect",), (2,), lambda c: c.world(tools='[tools.append]\neffect = "delete"\n'))
    field_case("tool-examples-string", ("examples",), (2,), lambda c: c.world(
        tools='[tools.append]\neffect = "write"\nexamples = "hi"\n'))
    field_case("tool-unlisted-emoji", ("tools.",), (2,), lambda c: c.world(tools='[tools."😀"]\neffect = "read"\n'))
    field_case("example-placeholder-missing", ("examples", "before"), (2,), lambda c: c.world(
        tools='[tools.append]\neffect = "write"\nexamples = [{ args = { text = "{before.3.x}" } }]\n'))
    field_case("example-120KB-args-server-stops-reading", W, (1, 2), lambda c: c.world(
        "at=init,stop-reading", tools=f'[tools.append]\neffect = "write"\nexamples = [{{ args = {{ text = '
                                      f'"{"a" * 60_000}", more = "{"b" * 60_000}" }} }}]\n'))
    field_case("answers-empty-phrase", ("failure",), (2,), lambda c: c.world(top='[answers]\nfailure = [""]\n'))
    field_case("http-without-url", ("url",), (2,), lambda c: c.world(kind="mcp_http"))
    field_case("http-url-other-host", ("url",), (2,), lambda c: c.world(kind="mcp_http", url="http://10.0.0.1:{port}/mcp"))
    field_case("fork-bad-entry", ("entry",), (2,), lambda c: c.world(server_extra='[server.fork]\npython = "python3"\n'
                                                                                  'entry = "not an entry"\n'))
    field_case("fork-missing-python", ("fork", "python") + W, (2,), lambda c: c.world(
        server_extra='[server.fork]\npython = "/nonexistent/python"\nentry = "m:f"\n'))
    field_case("version-todo", ("version",), (2,), lambda c: _sub(c.world(), 'version = "1"', 'version = "TODO"'))

    def raw_world(text: bytes) -> Callable[[Ctx], Path]:
        def make(c: Ctx) -> Path:
            d = c.work / "worlds" / "h"
            d.mkdir(parents=True)
            (d / "world.toml").write_bytes(text)
            return d
        return make
    field_case("file-not-utf8", ("world.toml",), (2,), raw_world(b'kind = "mcp_stdio"\nid = "\xff\xfe"\n'))
    field_case("file-nested-arrays", ("world.toml",), (2,), raw_world(b"x = " + b"[" * 100000 + b"]" * 100000 + b"\n"))
    field_case("file-duplicate-key", ("world.toml",), (2,), raw_world(b'kind = "mcp_stdio"\nkind = "mcp_stdio"\n'))
    field_case("file-empty", ("world.toml", "kind", "world"), (2,), raw_world(b""))

    def world_is_dir(c: Ctx) -> Path:
        d = c.work / "worlds" / "h"
        (d / "world.toml").mkdir(parents=True)
        return d
    field_case("world-toml-is-a-folder", ("world.toml",), (2,), world_is_dir)

    # == 11. protocol oddities (new) ==========================================================================
    g = "protocol"
    case("proto.early-answer", g, "scorecard", lambda c: scorecard(c, c.world("early-answer"), (0, 2)), W, True)
    case("proto.requests-to-client", g, "scorecard", lambda c: scorecard(c, c.world("request-client"), (0,)), W, True)
    case("proto.log-lines-on-stdout", g, "run", lambda c: (c.world("banner,log-stdout"), run_cmd(c, (0,)))[1], FAIL,
         True)
    case("proto.tools-change-mid-scorecard", g, "scorecard", lambda c: scorecard(c, c.world("tools-change=3"), (1,)),
         W, True, note="from its 3rd start the server no longer lists append")
    case("proto.tools-change-mid-run", g, "run", lambda c: (c.world("tools-change=2", conditions=("GW-bare", "GW-key")),
                                                            run_cmd(c))[1], FAIL, True, checks=RUN_CHECKS,
         note="two tuples; from its 2nd start the server no longer lists append")
    for surface in ("scorecard", "run"):
        case(f"toml.command-long-c-program.{surface}", "world.toml", surface, lambda c, surface=surface: (
            c.world(command=[PY, "-c", LONG_C, c.mark]), scorecard(c, c.work / "worlds" / "h", (0,))
            if surface == "scorecard" else run_cmd(c, (0,)))[1], W if surface == "scorecard" else FAIL, True,
             checks=RUN_CHECKS if surface == "run" else (), note="`python -c PROGRAM`, a program whose text before "
             "its first '/' is longer than 255 characters")
    case("proto.stderr-flood-200MB", g, "scorecard", lambda c: scorecard(c, c.world("stderr-flood=200,at=init"),
                                                                         (0,)), W, True)
    case("proto.stop-reading-stdin", g, "run", lambda c: (c.world("at=init,stop-reading"), run_cmd(c))[1], FAIL,
         True, checks=RUN_CHECKS)
    case("proto.20000-tools", g, "scorecard", lambda c: scorecard(c, c.world("many-tools=20000"), (0,)), W, True)


LONG_C = ("# a server written inline, as `python -c` (a long first line, then a slash: " + "x" * 300
          + " tools/list)\nexec(open(" + repr(str(SERVER)) + ").read())\n")
ECHO_ENV = ("import json, os, sys\nfor line in sys.stdin:\n m = json.loads(line)\n if 'id' not in m: continue\n"
            " r = {'protocolVersion': '2025-06-18', 'capabilities': {}, 'serverInfo': {'name': 'env', 'version': '1'}}"
            " if m['method'] == 'initialize' else {'tools': [{'name': 'echo', 'inputSchema': {'type': 'object'}},"
            " {'name': 'append', 'inputSchema': {'type': 'object'}}]} if m['method'] == 'tools/list' else"
            " {'content': [{'type': 'text', 'text': json.dumps(dict(os.environ))}], 'isError': False}\n"
            " print(json.dumps({'jsonrpc': '2.0', 'id': m['id'], 'result': r}), flush=True)\n")
CRASH_ENV = ("import os, sys\nsys.stderr.write('auth failed with ' + os.environ.get('MY_SERVICE_TOKEN', '?') + "
             "'\\n')\nsys.exit(3)\n")


def _edit(world: Path, old: str, new: str) -> Path:
    f = world / "world.toml"
    f.write_text(f.read_text(encoding="utf-8").replace(old, new, 1), encoding="utf-8")
    return world


def _sub(world: Path, pattern: str, new: str) -> Path:
    import re

    f = world / "world.toml"
    f.write_text(re.sub(pattern, lambda m: new, f.read_text(encoding="utf-8"), count=1), encoding="utf-8")
    return world


# ---------------------------------------------------------------------------------------------------------------
# running one case


def marked(ctx: Ctx) -> list[tuple[int, str]]:
    """Live processes carrying the case's mark in argv or environment, or working in the case's folder."""
    mark, base = ctx.mark.encode(), str(ctx.dir)
    out = []
    me = os.getpid()
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) == me:
            continue
        try:
            state = Path(f"/proc/{d}/stat").read_text().rsplit(")", 1)[1].split()[0]
            if state == "Z":
                continue
            cmd = Path(f"/proc/{d}/cmdline").read_bytes()
        except (OSError, IndexError):
            continue
        hit = mark in cmd
        if not hit:
            try:
                hit = mark in Path(f"/proc/{d}/environ").read_bytes()
            except OSError:
                pass
        if not hit:
            try:
                hit = os.readlink(f"/proc/{d}/cwd").startswith(base)
            except OSError:
                pass
        if hit:
            out.append((int(d), cmd.replace(b"\0", b" ").decode(errors="replace")[:100]))
    return out


def scratch_folders(ctx: Ctx) -> list[Path]:
    base = ctx.tmp / "aft-bench-scratch"
    return [p for p in base.rglob("*") if p.is_dir()] if base.is_dir() else []


def trigger_reached(ctx: Ctx, trigger: str, deadline: float, proc: subprocess.Popen[bytes]) -> bool:
    kind, _, arg = trigger.partition(":")
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        if kind == "time":
            return True
        if kind == "marked" and len([p for p in marked(ctx) if p[0] != proc.pid]) >= int(arg):
            return True
        if kind == "starts":
            try:
                if int((ctx.state / "starts.count").read_text() or 0) >= int(arg):
                    return True
            except (OSError, ValueError):
                pass
        time.sleep(0.1)
    return False


def execute(ctx: Ctx, run: Run) -> Result:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AFT_BENCH_")}
    env.update({"TMPDIR": str(ctx.tmp), "PYTHONDONTWRITEBYTECODE": "1", **run.env})
    prefix = ["nice", "-n", "10"]
    if run.limit_as:
        prefix += ["prlimit", f"--as={run.limit_as}", "--"]
    argv = [*prefix, str(AFT), *run.argv]
    t0 = time.monotonic()
    proc = subprocess.Popen(argv, cwd=run.cwd, env=env, stdin=subprocess.PIPE if run.client is not None else
                            subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True, preexec_fn=_default_signals)
    out: list[bytes] = []
    err: list[bytes] = []
    lines: queue.Queue[bytes | None] = queue.Queue()

    def pump(stream: Any, sink: list[bytes], q: queue.Queue[bytes | None] | None) -> None:
        total = 0
        for chunk in iter(lambda: stream.readline(1 << 20), b""):
            total += len(chunk)
            if total < 20 * 2 ** 20:
                sink.append(chunk)
            if q is not None:
                q.put(chunk)
        if q is not None:
            q.put(None)

    threads = []
    if run.stdout_closed:
        proc.stdout.close()  # type: ignore[union-attr]
    else:
        threads.append(threading.Thread(target=pump, args=(proc.stdout, out, lines if run.client is not None else None),
                                        daemon=True))
    threads.append(threading.Thread(target=pump, args=(proc.stderr, err, None), daemon=True))
    for t in threads:
        t.start()
    client_log: list[str] = []
    if run.client is not None:
        threading.Thread(target=drive_client, args=(proc, lines, run.client, client_log), daemon=True).start()
    missed = []
    deadline = t0 + run.timeout
    last_fire = first_fire = None
    for sig, trigger, delay in run.signals:
        if trigger.startswith("time") and last_fire is not None:
            ok = True
        else:
            ok = trigger_reached(ctx, trigger, deadline, proc)
        if not ok:
            missed.append(f"{signal.Signals(sig).name} not sent: {trigger} never reached")
            break
        time.sleep(delay)
        if proc.poll() is None:
            proc.send_signal(sig)
            if last_fire is None:
                first_fire = time.monotonic()
            last_fire = time.monotonic()
        else:
            missed.append(f"{signal.Signals(sig).name} not sent: the command had already ended")
    timed_out = False
    try:
        proc.wait(timeout=max(0.1, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        timed_out = True
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass
        proc.wait()
    ended = time.monotonic()
    for t in threads:
        t.join(timeout=10)
    return Result(proc.returncode, b"".join(out), b"".join(err), ended - t0, timed_out, missed, client_log,
                  first_fire, ended)


def _default_signals() -> None:
    """In the command's process before exec: every signal a case sends at its default disposition, whatever this
    probe inherited (nohup ignores SIGHUP, a shell without job control SIGINT)."""
    for sig in (signal.SIGHUP, signal.SIGINT, signal.SIGQUIT, signal.SIGTERM, signal.SIGUSR1, signal.SIGPIPE):
        signal.signal(sig, signal.SIG_DFL)


def drive_client(proc: subprocess.Popen[bytes], lines: queue.Queue[bytes | None],
                 calls: list[tuple[str, dict[str, Any]]], log: list[str]) -> None:
    """A minimal MCP client over the served stdio: initialize, list, the calls, then close (the session's end)."""
    def send(msg: dict[str, Any]) -> bool:
        try:
            proc.stdin.write(json.dumps(msg).encode() + b"\n")  # type: ignore[union-attr]
            proc.stdin.flush()  # type: ignore[union-attr]
            return True
        except (OSError, ValueError):
            log.append("stdin closed")
            return False

    def wait(rid: int) -> dict[str, Any] | None:
        end = time.monotonic() + 60
        while time.monotonic() < end:
            try:
                line = lines.get(timeout=1)
            except queue.Empty:
                continue
            if line is None:
                log.append(f"no answer to {rid}: stdout closed")
                return None
            try:
                msg = json.loads(line)
            except ValueError:
                continue
            if isinstance(msg, dict) and msg.get("id") == rid:
                return msg
        log.append(f"no answer to {rid} in 60 s")
        return None

    steps = [("initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                             "clientInfo": {"name": "hostile-probe", "version": "1"}}), ("tools/list", {})]
    steps += [("tools/call", {"name": n, "arguments": a}) for n, a in calls]
    for i, (method, params) in enumerate(steps, 1):
        if not send({"jsonrpc": "2.0", "id": i, "method": method, "params": params}):
            break
        got = wait(i)
        log.append(f"{method}: {json.dumps(got)[:160] if got else None}")
        if got is None:
            break
        if method == "initialize":
            send({"jsonrpc": "2.0", "method": "notifications/initialized"})
    try:
        proc.stdin.close()  # type: ignore[union-attr]
    except OSError:
        pass


def last_line(text: str) -> str:
    lines = [ln for ln in text.splitlines() if ln.strip()]
    return lines[-1].strip() if lines else ""


def files_state(root: Path) -> dict[str, tuple[int, int]]:
    state = {}
    for dirpath, _, filenames in os.walk(root):
        for f in filenames:
            p = os.path.join(dirpath, f)
            try:
                st = os.lstat(p)
            except OSError:
                continue
            state[p] = (st.st_size, st.st_mtime_ns)
    return state


def written_files(ctx: Ctx, before: dict[str, tuple[int, int]]) -> list[Path]:
    skip = (str(ctx.outside), str(ctx.state), str(ctx.tmp / "aft-bench-scratch"))
    out = []
    for p, st in files_state(ctx.dir).items():
        if p.startswith(skip) or before.get(p) == st:
            continue
        out.append(Path(p))
    return out


def file_text(p: Path) -> str:
    import stat as st_

    try:
        mode = os.lstat(p).st_mode
    except OSError:
        return ""
    if not st_.S_ISREG(mode):
        return ""
    if p.suffix == ".parquet":
        try:
            import pandas as pd

            return pd.read_parquet(p).to_csv()
        except Exception as exc:  # noqa: BLE001
            return f"(unreadable parquet: {exc})"
    try:
        with open(p, "rb") as fh:
            return fh.read(200 * 2 ** 20).decode(errors="replace")
    except OSError:
        return ""


def leftovers(ctx: Ctx) -> list[str]:
    out = []
    for p in sorted(ctx.tmp.iterdir()):
        if p.name == "aft-bench-scratch" and p.is_dir() and not any(p.iterdir()):
            continue
        if p.is_dir():
            inner = sorted(str(x.relative_to(ctx.tmp)) for x in p.rglob("*"))[:3]
            out.append(f"{p.name}/ ({', '.join(inner) or 'empty'})")
        else:
            out.append(p.name)
    return out


def judge(case: Case, ctx: Ctx, run: Run, res: Result, after: tuple[Run, Result] | None,
          orphans: list[tuple[int, str]], left: list[str], written: list[Path]) -> tuple[str, str, list[str]]:
    """(clean: yes / no / unjudged, observed, why not)."""
    why: list[str] = []
    err = res.stderr.decode(errors="replace")
    line = last_line(err)
    if res.timed_out:
        why.append(f"hang: still running after {run.timeout:g} s (killed)")
    elif res.rc not in run.expect:
        why.append(f"exit {res.rc}, expected {'/'.join(map(str, run.expect))}")
    if res.signalled_at is not None and not res.timed_out and res.ended_at - res.signalled_at > 30:
        why.append(f"still running {res.ended_at - res.signalled_at:.0f} s after the signal (ended only when its "
                   "client let go)" if run.client is not None else
                   f"ended {res.ended_at - res.signalled_at:.0f} s after the signal")
    if "Traceback (most recent call last)" in err or "Exception ignored" in err:
        why.append("a Python traceback on stderr")
    if "internal error" in err:
        why.append("internal error")
    killed = res.rc is not None and res.rc < 0
    if not res.timed_out and not killed and res.rc not in (0, 141):
        if not line.startswith("aft-bench"):
            why.append(f"last stderr line is not aft-bench's one line: {line[:80]!r}")
        elif case.names and not any(n in line for n in case.names):
            why.append(f"last line names none of {', '.join(case.names)}")
        if str(ctx.tmp) in line or "/aft-bench-scratch/" in line:
            why.append("its line names a scratch temp path")
    if after is not None:
        arun, ares = after
        aerr = ares.stderr.decode(errors="replace")
        if ares.timed_out:
            why.append("the next command hung")
        elif ares.rc not in arun.expect:
            why.append(f"the next command ({arun.argv[0]}) exited {ares.rc}: {last_line(aerr)[:100]}")
        if "Traceback (most recent call last)" in aerr or "internal error" in aerr:
            why.append("the next command: traceback or internal error")
    if orphans:
        why.append(f"{len(orphans)} orphan process(es): " + "; ".join(f"{p} {c[:60]}" for p, c in orphans[:2]))
    crash = [x for x in left if x.startswith("aft-bench/") and "crash-" in x]
    if crash:
        why.append("a crash log was written")
    if left:
        why.append("left in TMPDIR: " + ", ".join(left)[:200])
    secrets = (CANARY, *case.secrets)
    streams = {"stdout": res.stdout.decode(errors="replace"), "stderr": err}
    if after is not None:
        streams["next command's stderr"] = after[1].stderr.decode(errors="replace")
        streams["next command's stdout"] = after[1].stdout.decode(errors="replace")
    texts = dict(streams)
    for p in written:
        texts[str(p.relative_to(ctx.dir))] = file_text(p)
    for where, text in texts.items():
        hit = [s for s in secrets if s in text]
        if hit:
            why.append(f"secret {hit[0][:16]}... in {where}")
        if ctx.leak in text:
            why.append(f"a user's outside file's contents in {where}")
    for check in case.checks:
        try:
            why += check(ctx, res)
        except Exception as exc:  # noqa: BLE001 - a check that cannot run leaves the case unjudged
            res.trigger_missed.append(f"check {check.__name__} failed: {exc}")
    observed = "hang" if res.timed_out else f"exit {res.rc}"
    if line:
        observed += f": {line[:300]}"
    observed += f" ({res.seconds:.1f} s)"
    if res.trigger_missed:
        return "unjudged", observed, res.trigger_missed + why
    return ("no" if why else "yes"), observed, why


def run_case(case: Case, base: Path, index: int, nonce: str) -> dict[str, Any]:
    ctx = Ctx(base, case, index, nonce)
    row: dict[str, Any] = {"id": case.id, "group": case.group, "surface": case.surface, "new": case.new}
    try:
        run = case.build(ctx)
    except Exception as exc:  # noqa: BLE001 - a case that cannot be set up is unjudged
        row.update(expected="?", observed=f"setup failed: {type(exc).__name__}: {exc}"[:200], clean="unjudged",
                   why=["the probe could not set the case up"], command="")
        return row
    row["expected"] = "/".join(map(str, run.expect)) + (" then " + "next command" if case.after else "")
    row["command"] = " ".join(["aft-bench", *(_short(a) for a in run.argv)])
    before = ctx.before = files_state(ctx.dir)
    ctx.before_dirs = {str(p) for p in ctx.dir.rglob("*") if p.is_dir()}
    res = execute(ctx, run)
    after = None
    if case.after is not None:
        arun = case.after(ctx)
        after = (arun, execute(ctx, arun))
    deadline = time.monotonic() + 5
    orphans = marked(ctx)
    while orphans and time.monotonic() < deadline:
        time.sleep(0.2)
        orphans = marked(ctx)
    left = leftovers(ctx)
    written = written_files(ctx, before)
    clean, observed, why = judge(case, ctx, run, res, after, orphans, left, written)
    for pid, _ in orphans:  # what this case's command left running: ended by pid, so the next case starts clean
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    if ctx.listener is not None:
        ctx.listener.close()
    row.update(observed=observed, clean=clean, why=why, rc=res.rc, stderr_tail=res.stderr.decode(
        errors="replace").strip().splitlines()[-3:], client=res.client_log[-3:])
    if after is not None:
        row["next"] = f"exit {after[1].rc}: {last_line(after[1].stderr.decode(errors='replace'))[:150]}"
    return row


def _short(a: str) -> str:
    a = a if len(a) < 120 else a[:60] + f"...({len(a)} chars)"
    return json.dumps(a) if (not a or any(ch in a for ch in " \n\"'")) else a


# ---------------------------------------------------------------------------------------------------------------


def markdown(rows: list[dict[str, Any]], command: str, started: str, seconds: float, git: str) -> str:
    def cell(x: str) -> str:
        return x.replace("|", "\\|").replace("\n", " ")

    clean = sum(r["clean"] == "yes" for r in rows)
    dirty = sum(r["clean"] == "no" for r in rows)
    unjudged = sum(r["clean"] == "unjudged" for r in rows)
    new = sum(r["new"] for r in rows)
    out = ["# Hostile inputs of the external-world surfaces (issue 48)", "",
           f"Run {started} with `{command}` ({seconds / 60:.1f} min, one case at a time under `nice -n 10`). "
           f"{git}", "",
           f"**{clean} clean, {dirty} not clean, {unjudged} unjudged, of {len(rows)}** ({new} cases the issue does "
           "not name, marked *new*). What clean means, and how each case is built, is in the docstring of "
           "`benchmarks/hostile_inputs.py`.", ""]
    groups: dict[str, list[int]] = {}
    for r in rows:
        g = groups.setdefault(r["group"], [0, 0, 0])
        g[("yes", "no", "unjudged").index(r["clean"])] += 1
    out += ["| group | clean | not clean | unjudged |", "|---|---|---|---|"]
    out += [f"| {g} | {a} | {b} | {c} |" for g, (a, b, c) in groups.items()]
    out += ["", "| case | group | surface | expected | observed | clean | why not |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        out.append(f"| {cell(r['id'])}{' *new*' if r['new'] else ''} | {r['group']} | {r['surface']} | "
                   f"{r['expected']} | {cell(r['observed'])} | {r['clean']} | {cell('; '.join(r['why']))} |")
    out += ["", "## The commands of the cases not clean", ""]
    for r in rows:
        if r["clean"] != "yes":
            out.append(f"- `{r['id']}`: `{cell(r.get('command', ''))[:400]}`")
    return "\n".join(out) + "\n"


def code_state(when: str, before: str | None) -> str:
    """The code the cases ran against: the commit, and any uncommitted change under aft_bench/ (with --only runs
    on a tree another edit is changing, the end state too)."""
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout
    dirty = subprocess.run(["git", "status", "--short", "aft_bench"], cwd=ROOT, capture_output=True, text=True).stdout
    now = f"commit {head.strip()}" + (f" with {len(dirty.splitlines())} uncommitted changes under aft_bench/ "
                                      f"({', '.join(x.split()[-1] for x in dirty.splitlines()[:6])})"
                                      if dirty.strip() else "")
    if before is None:
        return now
    return (f"Code: {before}, unchanged to the end." if now == before else
            f"Code: {before} at the start, {now} at the end (the tree changed while the cases ran).")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", action="append", help="run the cases whose id holds this text (repeatable)")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "hostile_inputs.md"), help="the Markdown report")
    ap.add_argument("--json", help="also write every row as JSON here")
    ap.add_argument("--list", action="store_true", help="list the cases and exit")
    ap.add_argument("--keep", action="store_true", help="keep the cases' folders (printed)")
    args = ap.parse_args()
    build_cases()
    ids = [c.id for c in CASES]
    assert len(ids) == len(set(ids)), sorted({i for i in ids if ids.count(i) > 1})
    cases = [c for c in CASES if not args.only or any(o in c.id for o in args.only)]
    if args.list:
        for c in cases:
            print(f"{c.id:50} {c.group:12} {c.surface:20} {'new' if c.new else ''}")
        print(f"{len(cases)} cases, {sum(c.new for c in cases)} new")
        return 0
    base = Path(tempfile.mkdtemp(prefix="hostile-probe-", dir="/tmp"))
    nonce = os.urandom(3).hex()
    started = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
    git = code_state("", None)
    t0 = time.monotonic()
    rows = []
    git_at_start = git
    print(f"{len(cases)} cases; folders under {base}", flush=True)
    for i, c in enumerate(cases):
        row = run_case(c, base, i, nonce)
        rows.append(row)
        print(f"[{i + 1}/{len(cases)}] {row['clean']:8} {c.id}: {row['observed'][:110]}"
              + (f"\n           why: {'; '.join(row['why'])[:300]}" if row["why"] else ""), flush=True)
        if not args.keep:
            shutil.rmtree(base / c.id, ignore_errors=True)
    seconds = time.monotonic() - t0
    git = code_state("at the start", git_at_start)
    command = ".venv/bin/python benchmarks/hostile_inputs.py" + "".join(f" --only {o}" for o in args.only or [])
    text = markdown(rows, command, started, seconds, git)
    Path(args.out).write_text(text, encoding="utf-8")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1, default=str), encoding="utf-8")
    print()
    width = max(len(r["id"]) for r in rows)
    print(f"{'case':{width}}  {'group':11} {'surface':18} {'expected':10} clean     observed / why not")
    for r in rows:
        print(f"{r['id']:{width}}  {r['group']:11} {r['surface']:18} {r['expected'][:10]:10} {r['clean']:9} "
              f"{r['observed'][:90]}" + (f"\n{'':{width + 52}}why: {'; '.join(r['why'])[:200]}" if r["why"] else ""))
    counts = {k: sum(r["clean"] == k for r in rows) for k in ("yes", "no", "unjudged")}
    print(f"\n{counts['yes']} clean, {counts['no']} not clean, {counts['unjudged']} unjudged, of {len(rows)} "
          f"({sum(r['new'] for r in rows)} new); written to {args.out}")
    if not args.keep:
        shutil.rmtree(base, ignore_errors=True)
    else:
        print(f"case folders kept in {base}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
