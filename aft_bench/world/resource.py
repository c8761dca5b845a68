"""An external world's resource: a fresh folder per episode prepared by the world's fixture, the foreign write
that stands for another writer, and the probe that reads its real state without the server.

A snapshot is `{"records": {collection: {key: {field: value}}}}`, the shape task postconditions (`Clause`) read,
so a goal over a real git repository is written the way one over a built-in world is.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import stat
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Sequence

from aft_bench.common import untrusted_json
from aft_bench.common.cache import BoundedCache
from aft_bench.common.canonical import Frozen, canonical_json, canonical_pair
from aft_bench.common.gcpause import paused
from aft_bench.common.lifetime import contained
from aft_bench.common.scratch import scratch_dir
from aft_bench.world.external import ExternalWorld, Probe, expand

TEXT_MAX = 4096  # a file's text is part of the snapshot up to this size (its hash always is)
COMMAND_TIMEOUT_S = 60.0


class ResourceFailed(Exception):
    """The fixture, a foreign write or the probe failed; the message names which and how, `field` the world
    file's field that did (`probe`, `fixture.commands`, `foreign`)."""

    def __init__(self, message: str, field: str = "probe") -> None:
        super().__init__(message)
        self.field = field


def _stderr(err: bytes) -> str:
    """A failing command's last words, credentials redacted (what a server or probe prints may hold a key)."""
    from aft_bench.common.secrets import redact

    lines = err.decode(errors="replace").strip().splitlines()
    return redact(" / ".join(lines[-3:])[:300]) if lines else "nothing on stderr"


class Resource:
    """One episode's folder. `make()` prepares it; `remove()` deletes it (idempotent)."""

    def __init__(self, world: ExternalWorld, parent: Path | None = None) -> None:
        self.world = world
        # absolute and with no symlink in it, whatever `parent` was given as: the server, the probe and the
        # gateway's path mapping all see the one same path (a relative one broke every real-server run)
        self.root = Path(os.path.realpath(tempfile.mkdtemp(prefix=f"aft-{world.id}-",
                                                           dir=parent if parent is not None else scratch_dir())))

    def env(self) -> dict[str, str]:
        """The fixture's environment, expanded, over ours (for the fixture's commands and the server)."""
        return {k: expand(v, self.root, self.world.server.version, self.world.folder)
                for k, v in self.world.fixture.env.items()}

    def make(self) -> Resource:
        fx = self.world.fixture
        try:
            for rel, text in sorted(fx.files.items()):
                p = self.root / rel
                p.parent.mkdir(parents=True, exist_ok=True)
                p.write_text(text, encoding="utf-8")
            for cmd in fx.commands:
                self.run(cmd, "fixture", "fixture.commands")
        except BaseException:
            self.remove()
            raise
        return self

    def foreign_write(self) -> None:
        """Another writer changes the resource (the world's `foreign` commands)."""
        for cmd in self.world.foreign:
            self.run(cmd, "foreign write", "foreign")

    def run(self, cmd: Sequence[str], what: str, field: str) -> str:
        argv = [expand(a, self.root, self.world.server.version, self.world.folder) for a in cmd]
        try:
            done = subprocess.run(argv, cwd=self.root, env={**os.environ, **self.env()}, capture_output=True,
                                  timeout=COMMAND_TIMEOUT_S)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise ResourceFailed(f"world '{self.world.id}': {what} command {argv[0]!r} failed: {exc}", field) \
                from None
        if done.returncode != 0:
            raise ResourceFailed(f"world '{self.world.id}': {what} command {' '.join(argv)!r} exited "
                                 f"{done.returncode}: {_stderr(done.stderr)}", field)
        return done.stdout.decode(errors="replace")

    def probe(self) -> dict[str, Any]:
        """The real state now, as a canonical snapshot."""
        return probe(self.world.probe, self.root, self.env(), self.world.id, self.world.folder,
                     self.world.server.version)

    def remove(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


def probe(spec: Probe, root: Path, env: dict[str, str], world_id: str, folder: Path | None = None,
          version: str = "") -> dict[str, Any]:
    """The real state under `root` as `spec` reads it; a probe command's `{version}` is the server's `version`."""
    field = "probe.command" if spec.command is not None else f"probe.{spec.builtin}"
    try:
        if spec.builtin is None:
            return check_snapshot(_command_probe(spec, root, env, folder, version))
        path = inside(root, spec.path)
        builtin = spec.builtin

        def read() -> dict[str, Any]:
            return check_snapshot(BUILTIN[builtin](path, env, spec.timeout_s, spec))

        memo = _memo_key(spec, path)
        return read() if memo is None else _READ.get(memo, lambda: Frozen(read())).thaw()
    except ResourceFailed as exc:
        raise ResourceFailed(f"world '{world_id}': probe failed: {exc}", field) from None


ONE_FILE = ("jsonl", "jsonl_graph")  # built-ins whose snapshot is a function of one file's bytes alone
READ_KEPT = 4
_READ: BoundedCache[tuple[str, str], Frozen] = BoundedCache(READ_KEPT)  # (the probe, the file's bytes' SHA-256)


def _memo_key(spec: Probe, path: Path) -> tuple[str, str] | None:
    """What a one-file probe's snapshot depends on: the probe and the file's bytes. A scorecard probes the same
    file a dozen times, mostly unchanged; a 300,000-line state file took 3.5 s a reading."""
    if spec.builtin not in ONE_FILE or not regular(path):
        return None
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ResourceFailed(f"{path.name}: {exc.strerror or exc}") from None
    return spec.model_dump_json(), hashlib.sha256(data).hexdigest()


def inside(root: Path, rel: str) -> Path:
    """`root/rel`, refused where it leaves the resource (a symlink a server planted to a file of the user's, or the
    resource folder itself replaced by one)."""
    if os.path.islink(root) or Path(os.path.realpath(root)) != Path(os.path.realpath(root.parent)) / root.name:
        raise ResourceFailed("the resource folder was replaced by a link to somewhere else")
    base = Path(os.path.realpath(root))
    target = Path(os.path.realpath(base / rel))
    if target != base and base not in target.parents:
        raise ResourceFailed(f"{rel!r} leads outside the resource")
    return target


def check_snapshot(snap: Any) -> dict[str, Any]:
    """A snapshot is an object with `records`: collections of keyed records, each an object; canonical JSON."""
    if not isinstance(snap, dict) or not isinstance(snap.get("records"), dict):
        raise ResourceFailed("printed JSON without a 'records' object")
    for coll, recs in snap["records"].items():
        if not isinstance(recs, dict) or not all(isinstance(r, dict) for r in recs.values()):
            raise ResourceFailed(f"collection {coll!r} is not an object of records (objects)")
    try:
        return canonical_pair(snap)[1]
    except (TypeError, ValueError) as exc:
        raise ResourceFailed(f"gave a value that is not canonical JSON: {exc}") from None


def _command_probe(spec: Probe, root: Path, env: dict[str, str], folder: Path | None, version: str) -> Any:
    assert spec.command is not None
    argv = [expand(a, root, version, folder) for a in spec.command]
    try:
        done = subprocess.run(argv, cwd=root, env={**os.environ, **env}, capture_output=True, timeout=spec.timeout_s)
    except subprocess.TimeoutExpired:
        raise ResourceFailed(f"{argv[0]!r} did not finish within {spec.timeout_s:g} s") from None
    except OSError as exc:
        raise ResourceFailed(f"cannot run {argv[0]!r}: {exc.strerror or exc}") from None
    if done.returncode != 0:
        raise ResourceFailed(f"{argv[0]!r} exited {done.returncode}: {_stderr(done.stderr)}")
    try:
        return untrusted_json.parse(done.stdout)
    except untrusted_json.UntrustedJson as exc:
        raise ResourceFailed(f"{argv[0]!r} printed JSON the harness cannot keep: {exc}") from None
    except ValueError:
        head = done.stdout[:60].decode(errors="replace")
        raise ResourceFailed(f"{argv[0]!r} printed something other than JSON: {head!r}") from None


# git reading a repository a server wrote: nothing of the repository's own configuration may run a program (an
# fsmonitor hook, an external diff, a text conversion, a filter: each would run with the user's rights, outside
# the server's namespace) and no system or user configuration changes what is read
GIT = ("git", "-c", "safe.directory=*", "-c", "core.quotepath=off", "-c", "core.fsmonitor=false",
       "-c", "diff.external=", "--no-optional-locks")
GIT_ENV = {"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull, "GIT_TERMINAL_PROMPT": "0",
           "GIT_OPTIONAL_LOCKS": "0"}


def _git(root: Path, env: dict[str, str], timeout: float, *args: str) -> str:
    return _gits(root, env, timeout, args)[0]


def _gits(root: Path, env: dict[str, str], timeout: float, *commands: Sequence[str]) -> list[str]:
    """Run read-only git commands side by side (each is a process start; together they cost about one) and
    return their outputs in order; the first that fails or overruns `timeout` fails the probe."""
    procs: list[subprocess.Popen[bytes]] = []
    try:
        filters = _filters(root)
        for args in commands:
            try:
                argv, fds = contained([*GIT, *filters, *args])  # what git might still start dies with it
                procs.append(subprocess.Popen(argv, cwd=root, env={**os.environ, **env, **GIT_ENV, "GIT_DIR":
                                                                   str(root / ".git"), "GIT_WORK_TREE": str(root)},
                                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, pass_fds=fds))
            except OSError as exc:
                raise ResourceFailed(f"git {args[0]}: {exc}") from None
        deadline = time.monotonic() + timeout
        outs = []
        for args, proc in zip(commands, procs):
            try:
                out, err = proc.communicate(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                raise ResourceFailed(f"git {args[0]}: did not finish within {timeout:g} s") from None
            if proc.returncode != 0:  # git names the folder it read: a temporary one, gone when this is read
                said = err.decode(errors="replace").replace(str(root), "<resource>").strip()[:200]
                raise ResourceFailed(f"git {args[0]} exited {proc.returncode}: {said}")
            outs.append(out.decode("utf-8", errors="replace"))
        return outs
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            for stream in (proc.stdout, proc.stderr):
                if stream is not None:
                    stream.close()


def _head(root: Path, env: dict[str, str], timeout: float, branches: dict[str, dict[str, Any]],
          has_commits: bool) -> dict[str, Any]:
    """HEAD's branch (None when detached) and commit, read from the repository's HEAD file where it is the plain
    form (`ref: refs/heads/NAME` or a commit id), else with `git rev-parse`."""
    try:  # git itself reads it by the same rules (a FIFO there fails the probe, never blocks it)
        text = (root / ".git" / "HEAD").read_text(encoding="utf-8").strip() if regular(root / ".git" / "HEAD") \
            else ""
    except (OSError, UnicodeDecodeError):
        text = ""
    if text.startswith("ref: refs/heads/"):
        name = text.removeprefix("ref: refs/heads/")
        return {"branch": name, "commit": branches[name]["commit"] if name in branches and has_commits else None}
    if len(text) in (40, 64) and all(c in "0123456789abcdef" for c in text):
        return {"branch": None, "commit": text}
    if not has_commits:  # an unborn branch: rev-parse has no revision to name, symbolic-ref names the branch
        return {"branch": _git(root, env, timeout, "symbolic-ref", "--short", "HEAD").strip(), "commit": None}
    head_branch = _git(root, env, timeout, "rev-parse", "--abbrev-ref", "HEAD").strip()
    return {"branch": None if head_branch == "HEAD" else head_branch,
            "commit": _git(root, env, timeout, "rev-parse", "HEAD").strip()}


def _file_record(p: Path) -> dict[str, Any]:
    data = p.read_bytes()
    rec: dict[str, Any] = {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}
    if len(data) <= TEXT_MAX:
        try:
            rec["text"] = data.decode("utf-8")
        except UnicodeDecodeError:
            pass
    return rec


def _filters(root: Path) -> list[str]:
    """`-c` options that empty every clean, smudge and process filter the repository's own config names (a status
    would run them on changed files); its config is read as text, never run."""
    try:
        text = (root / ".git" / "config").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    out: list[str] = []
    for name in sorted(set(re.findall(r'^\s*\[\s*filter\s+"([^"\n]*)"\s*\]', text, re.M | re.I))):
        for key in ("clean", "smudge", "process"):
            out += ["-c", f"filter.{name}.{key}="]
    return out


LOG_END = "\x00\x1e\x00"  # after each commit of the log: a message never holds a NUL, so never this


def probe_git(root: Path, env: dict[str, str], timeout: float, spec: Probe | None = None) -> dict[str, Any]:
    """Commits reachable from any ref (message, tree, parents, whether it changed nothing), branches, HEAD, the
    index's staged paths and the work tree's files, read with git plumbing. The repository is the folder's own
    `.git` folder: a `.git` file or link pointing elsewhere (a server's way to make the probe read another
    repository of the user's) fails the probe."""
    dot = root / ".git"
    if dot.is_symlink() or (dot.exists() and not dot.is_dir()):
        raise ResourceFailed(".git is not a folder in the resource (a link or a gitdir file leads elsewhere)")
    commits: dict[str, dict[str, Any]] = {}
    log, refs, cached, listed = _gits(
        root, env, timeout, ("log", "--all", "--no-ext-diff", "--no-textconv", "--format=%H%x00%T%x00%P%x00%B%x00%x1e%x00"),
        ("for-each-ref", "--format=%(refname:short)%00%(objectname)", "refs/heads"),
        ("diff", "--cached", "--name-status", "-z"), ("ls-files", "-z", "--cached", "--others", "--exclude-standard"))
    trees: dict[str, str] = {}
    rows = []
    for entry in log.split(LOG_END):
        entry = entry.strip("\n")
        if not entry:
            continue
        sha, tree, parents, body = (entry.split("\x00", 3) + ["", "", ""])[:4]
        trees[sha] = tree
        rows.append((sha, tree, parents.split(), body.strip()))
    for sha, tree, parents, body in rows:
        first = parents[0] if parents else None
        commits[sha] = {"message": body, "tree": tree, "parents": parents,
                        "empty": first is not None and trees.get(first) == tree}
    branches = {}
    for line in refs.splitlines():
        name, _, sha = line.partition("\x00")
        branches[name] = {"commit": sha}
    head = _head(root, env, timeout, branches, bool(commits))
    staged = {}
    parts = [x for x in cached.split("\x00") if x]
    i = 0
    while i < len(parts):
        status = parts[i]
        n = 3 if status[:1] in ("R", "C") else 2
        staged[parts[i + n - 1]] = {"status": status[:1]}
        i += n
    files = {}
    for rel in sorted(set(x for x in listed.split("\x00") if x)):
        p = root / rel
        if p.is_symlink():  # its target's name, never the file it leads to (which may lie outside the resource)
            files[rel] = {"symlink": os.readlink(p)}
        elif p.is_file():
            files[rel] = _file_record(p)
    return {"records": {"commits": commits, "branches": branches, "head": {"HEAD": head}, "staged": staged,
                        "files": files}}


def probe_folder(root: Path, env: dict[str, str], timeout: float, spec: Probe | None = None) -> dict[str, Any]:
    """Every file (content hash, size, text when small), symlink (its target's name) and folder under `root`, by
    relative path; or, where `root` names one file (`path = "todo.txt"`), that file alone (none until it exists)."""
    files: dict[str, dict[str, Any]] = {}
    dirs: dict[str, dict[str, Any]] = {}
    if spec is not None and spec.path not in (".", "") and not root.is_dir():
        if root.is_file():
            files[Path(spec.path).as_posix()] = _file_record(root)
        return {"records": {"files": files}}
    if not root.is_dir():
        raise ResourceFailed(f"{spec.path if spec is not None else '.'} is not a folder in the resource")
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        base = Path(dirpath)
        for d in dirnames:
            if (base / d).is_symlink():  # a link to a folder is a link, never walked (os.walk does not follow it)
                files[(base / d).relative_to(root).as_posix()] = {"symlink": os.readlink(base / d)}
            else:
                dirs[(base / d).relative_to(root).as_posix()] = {"dir": True}
        for f in sorted(filenames):
            p = base / f
            if p.is_symlink():
                files[p.relative_to(root).as_posix()] = {"symlink": os.readlink(p)}
            elif p.is_file():
                files[p.relative_to(root).as_posix()] = _file_record(p)
    return {"records": {"files": files, "dirs": dirs}}


def _cell(value: Any) -> Any:
    """A SQLite value as JSON: a blob as its hex, a float that is whole kept a float's text."""
    if isinstance(value, bytes):
        return {"blob": value.hex()}
    return value


def probe_sqlite(path: Path, env: dict[str, str], timeout: float, spec: Probe | None = None) -> dict[str, Any]:
    """A SQLite database read-only: `sqlite_master` (every table, index, view and trigger with its SQL), and each
    table's rows by rowid (by their content for a table without rowids); no database yet is an empty one."""
    import sqlite3

    records: dict[str, dict[str, Any]] = {"sqlite_master": {}}
    if not regular(path):
        return {"records": records}
    try:
        # as a URI, percent-encoded: a '?' or '#' in the name had cut it short (an empty file made, the wrong one read)
        con = sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True, timeout=timeout)
    except sqlite3.Error as exc:
        raise ResourceFailed(f"{path.name}: {exc}") from None
    try:
        master = con.execute("SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY name").fetchall()
        for kind, name, table, sql in master:
            records["sqlite_master"][str(name)] = {"type": kind, "table": table, "sql": sql}
        for kind, name, _, sql in master:
            if kind != "table" or str(name).startswith("sqlite_"):
                continue
            quoted = '"' + str(name).replace('"', '""') + '"'
            rows: dict[str, Any] = {}
            without_rowid = "WITHOUT ROWID" in str(sql or "").upper()
            cur = con.execute(f"SELECT * FROM {quoted}" if without_rowid else f"SELECT rowid, * FROM {quoted}")
            cols = [d[0] for d in cur.description]
            for row in cur:
                if without_rowid:
                    rec = {c: _cell(v) for c, v in zip(cols, row)}
                    _keep(rows, canonical_json(rec), rec)
                else:
                    rows[str(row[0])] = {c: _cell(v) for c, v in zip(cols[1:], row[1:])}
            records[str(name)] = rows
    except sqlite3.Error as exc:
        raise ResourceFailed(f"{path.name}: {exc}") from None
    finally:
        con.close()
    return {"records": records}


LINE_KEYS = ("id", "name", "key", "uuid")


def _json_lines(path: Path) -> list[tuple[int, Any]]:
    """(line number, value) of each non-blank line of a JSON-lines file (none if it does not exist yet); a line
    that is not JSON, or nested too deep to read, fails the probe naming the file and the line."""
    if not regular(path):
        return []
    try:
        with paused():
            return [(n, value) for n, _, value in untrusted_json.lines(path.read_text(encoding="utf-8",
                                                                                       errors="replace"))]
    except untrusted_json.UntrustedJson as exc:  # `lines` sets `.lineno` on both
        raise ResourceFailed(f"{path.name} line {exc.lineno}: {exc}") from None  # type: ignore[attr-defined]
    except ValueError as exc:
        raise ResourceFailed(f"{path.name} line {exc.lineno} is not JSON") from None  # type: ignore[attr-defined]


def regular(path: Path) -> bool:
    """Whether `path` is a regular file to read (False: there is none yet); anything else a server may have left
    there (a FIFO, which would block the reader forever, a device, a folder) fails the probe naming it."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise ResourceFailed(f"{path.name}: {exc.strerror or exc}") from None
    if not stat.S_ISREG(mode):
        kind = "a folder" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode) else "not a regular file"
        raise ResourceFailed(f"{path.name} is {kind}, not a file the probe can read")
    return True


def probe_jsonl(path: Path, env: dict[str, str], timeout: float, spec: Probe | None = None) -> dict[str, Any]:
    """A JSON-lines file: each line a record of `lines`, keyed by the probe's `key` field, else the first of `id`,
    `name`, `key`, `uuid` it has, else a digest of its content; a second line under one key is `key#2`."""
    lines: dict[str, dict[str, Any]] = {}
    for _, item in _json_lines(path):
        rec = item if isinstance(item, dict) else {"value": item}
        names = (spec.key,) if spec is not None and spec.key else LINE_KEYS
        key = next((str(rec[k]) for k in names if k in rec and not isinstance(rec[k], (dict, list))), None)
        _keep(lines, key if key is not None else hashlib.sha256(canonical_json(rec).encode()).hexdigest()[:16], rec)
    return {"records": {"lines": lines}}


def probe_jsonl_graph(path: Path, env: dict[str, str], timeout: float, spec: Probe | None = None) -> dict[str, Any]:
    """A knowledge-graph JSONL file (the memory server's): entities by name, relations by `from|type|to`; a second
    line for the same entity or relation is kept as `name#2`, `name#3` (so a duplicate can be counted)."""
    entities: dict[str, dict[str, Any]] = {}
    relations: dict[str, dict[str, Any]] = {}
    for n, item in _json_lines(path):
        if not isinstance(item, dict):
            raise ResourceFailed(f"{path.name} line {n} is not an object")
        if item.get("type") == "entity":
            _keep(entities, str(item.get("name")), {"name": item.get("name"), "entityType": item.get("entityType"),
                                                   "observations": item.get("observations") or []})
        elif item.get("type") == "relation":
            key = f"{item.get('from')}|{item.get('relationType')}|{item.get('to')}"
            _keep(relations, key, {"from": item.get("from"), "to": item.get("to"),
                                   "relationType": item.get("relationType")})
    return {"records": {"entities": entities, "relations": relations}}


def _keep(coll: dict[str, dict[str, Any]], key: str, rec: dict[str, Any]) -> None:
    k, n = key, 1
    while k in coll:
        n += 1
        k = f"{key}#{n}"
    coll[k] = rec


BUILTIN: dict[str, Callable[[Path, dict[str, str], float, Probe], dict[str, Any]]] = {
    "git": probe_git, "folder": probe_folder, "sqlite": probe_sqlite, "jsonl": probe_jsonl,
    "jsonl_graph": probe_jsonl_graph}
