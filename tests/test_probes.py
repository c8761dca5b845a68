"""The built-in probes a new server's world needs no code for (issue 47): sqlite, jsonl, folder naming one file;
each read as a person would, with known positives and negatives; a probe that would read outside the resource is
refused; a failing probe names its field and shows its stderr, with credentials redacted; `{world}` names the
world's own folder, where a probe script kept beside world.toml lies."""

from __future__ import annotations

import os
import sqlite3
import sys
from pathlib import Path

import pytest

from aft_bench.common.errors import InputError
from aft_bench.world import snapshot
from aft_bench.world.external import Probe, load_external
from aft_bench.world.resource import ResourceFailed, probe


def _db(path: Path, *sql: str) -> None:
    con = sqlite3.connect(path)
    for s in sql:
        con.execute(s)
    con.commit()
    con.close()


def test_the_sqlite_probe_reads_every_table_and_tells_insert_update_delete_apart(tmp_path: Path) -> None:
    spec = Probe(builtin="sqlite", path="app.db")
    assert probe(spec, tmp_path, {}, "w") == {"records": {"sqlite_master": {}}}  # no database yet: empty
    db = tmp_path / "app.db"
    _db(db, "CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT, raw BLOB)",
        "CREATE TABLE tags (name TEXT PRIMARY KEY, n INT) WITHOUT ROWID",
        "INSERT INTO notes (body, raw) VALUES ('hello', x'00ff')", "INSERT INTO tags VALUES ('a', 1)")
    s0 = probe(spec, tmp_path, {}, "w")
    assert s0["records"]["notes"] == {"1": {"id": 1, "body": "hello", "raw": {"blob": "00ff"}}}
    assert list(s0["records"]["tags"].values()) == [{"name": "a", "n": 1}]
    assert set(s0["records"]["sqlite_master"]) >= {"notes", "tags"}
    _db(db, "INSERT INTO notes (body) VALUES ('hello')")  # the same row again: a second record
    s1 = probe(spec, tmp_path, {}, "w")
    assert snapshot.diff(s0, s1) == {"notes": {"added": ["2"], "removed": [], "changed": []}}
    _db(db, "UPDATE notes SET body = 'bye' WHERE id = 1")
    s2 = probe(spec, tmp_path, {}, "w")
    assert snapshot.diff(s1, s2) == {"notes": {"added": [], "removed": [], "changed": ["1"]}}
    _db(db, "UPDATE notes SET body = 'bye' WHERE id = 1")  # known negative: an update that changes nothing
    assert snapshot.diff(s2, probe(spec, tmp_path, {}, "w")) == {}
    _db(db, "DELETE FROM notes WHERE id = 2", "CREATE INDEX ix ON notes (body)")
    d = snapshot.diff(s2, probe(spec, tmp_path, {}, "w"))
    assert d["notes"]["removed"] == ["2"] and d["sqlite_master"]["added"] == ["ix"]


def test_the_sqlite_probe_never_writes_the_database(tmp_path: Path) -> None:
    db = tmp_path / "app.db"
    _db(db, "CREATE TABLE t (x)")
    before = db.read_bytes()
    probe(Probe(builtin="sqlite", path="app.db"), tmp_path, {}, "w")
    assert db.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["app.db"]


def test_the_jsonl_probe_keys_lines_and_keeps_a_repeated_one(tmp_path: Path) -> None:
    f = tmp_path / "log.jsonl"
    f.write_text('{"id": 7, "text": "a"}\n{"id": 7, "text": "a"}\n{"text": "no id"}\n42\n\n')
    recs = probe(Probe(builtin="jsonl", path="log.jsonl"), tmp_path, {}, "w")["records"]["lines"]
    assert recs["7"] == recs["7#2"] == {"id": 7, "text": "a"}
    assert {"text": "no id"} in recs.values() and {"value": 42} in recs.values() and len(recs) == 4
    by_text = probe(Probe(builtin="jsonl", path="log.jsonl", key="text"), tmp_path, {}, "w")["records"]["lines"]
    assert set(by_text) >= {"a", "a#2", "no id"}
    f.write_text('{"id": 7\n')
    with pytest.raises(ResourceFailed, match="log.jsonl line 1 is not JSON"):
        probe(Probe(builtin="jsonl", path="log.jsonl"), tmp_path, {}, "w")


def test_a_remembered_jsonl_reading_follows_every_byte_and_is_never_shared(tmp_path: Path) -> None:
    """A one-file probe's snapshot is remembered by the file's bytes (a scorecard reads a large state file a dozen
    times): a change of one byte, even keeping size and time, is read anew; an unchanged file's snapshot comes back
    equal but as a fresh copy, so a caller that changes one cannot change the next."""
    spec = Probe(builtin="jsonl_graph", path="m.jsonl")
    f = tmp_path / "m.jsonl"
    f.write_text('{"type": "entity", "name": "a", "entityType": "x", "observations": []}\n')
    first = probe(spec, tmp_path, {}, "w")
    first["records"]["entities"]["a"]["observations"].append("planted")
    again = probe(spec, tmp_path, {}, "w")
    assert again["records"]["entities"] == {"a": {"name": "a", "entityType": "x", "observations": []}}
    stat = f.stat()
    f.write_text('{"type": "entity", "name": "b", "entityType": "x", "observations": []}\n')  # same size
    os.utime(f, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert list(probe(spec, tmp_path, {}, "w")["records"]["entities"]) == ["b"]
    other = tmp_path / "second"
    other.mkdir()
    (other / "m.jsonl").write_bytes(f.read_bytes())  # another resource, the same bytes: the same snapshot
    assert probe(spec, other, {}, "w") == probe(spec, tmp_path, {}, "w")
    f.write_text("not json\n")
    with pytest.raises(ResourceFailed, match="m.jsonl line 1"):
        probe(spec, tmp_path, {}, "w")


def test_the_folder_probe_can_name_one_file(tmp_path: Path) -> None:
    spec = Probe(builtin="folder", path="todo.txt")
    assert probe(spec, tmp_path, {}, "w") == {"records": {"files": {}}}
    (tmp_path / "todo.txt").write_text("call the bank\n")
    (tmp_path / "other.txt").write_text("not read\n")
    files = probe(spec, tmp_path, {}, "w")["records"]["files"]
    assert list(files) == ["todo.txt"] and files["todo.txt"]["text"] == "call the bank\n"


def test_a_probe_never_reads_outside_the_resource(tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("API_KEY=sk-live-0123456789abcdef\n")
    root = tmp_path / "root"
    root.mkdir()
    (root / "notes.db").symlink_to(secret)  # a server planted a symlink to a file of the user's
    (root / "todo.txt").symlink_to(secret)
    for spec in (Probe(builtin="sqlite", path="notes.db"), Probe(builtin="folder", path="todo.txt"),
                 Probe(builtin="jsonl", path="todo.txt")):
        with pytest.raises(ResourceFailed, match="leads outside the resource"):
            probe(spec, root, {}, "w")
    files = probe(Probe(builtin="folder"), root, {}, "w")["records"]["files"]  # walked: the link, not its file
    assert files["todo.txt"] == {"symlink": str(secret)} and "sk-live" not in str(files)
    for bad in ("../secret.txt", "/etc/passwd", "{root}/x"):
        with pytest.raises(Exception, match="a relative path without '..'"):
            Probe(builtin="folder", path=bad)


def test_the_git_probe_records_a_symlinks_target_never_its_contents(tmp_path: Path) -> None:
    import subprocess

    from aft_bench.world.resource import probe_git

    secret = tmp_path / "secret.txt"
    secret.write_text("API_KEY=sk-live-0123456789abcdef\n")
    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    (repo / "link").symlink_to(secret)
    files = probe_git(repo, {}, 10)["records"]["files"]
    assert files["link"] == {"symlink": str(secret)}


def _world(tmp_path: Path, probe_toml: str) -> Path:
    folder = tmp_path / "w"
    folder.mkdir(exist_ok=True)
    server = Path(__file__).parent / "data" / "echo_mcp.py"
    (folder / "world.toml").write_text(
        f'kind = "mcp_stdio"\nid = "w"\n[server]\npackage = "echo"\nversion = "1"\n'
        f'command = ["{sys.executable}", "{server}"]\n[probe]\n{probe_toml}\n[tools.echo]\neffect = "read"\n')
    return folder


def test_a_probe_script_beside_world_toml_is_named_by_world(tmp_path: Path) -> None:
    from aft_bench.world.resource import Resource

    folder = _world(tmp_path, 'command = ["{world}/dump.sh"]')
    script = folder / "dump.sh"
    script.write_text('#!/bin/sh\necho \'{"records": {"here": {"it": {"cwd": "\'"$(pwd)"\'"}}}}\'\n')
    script.chmod(0o755)
    other = tmp_path / "elsewhere"
    other.mkdir()
    cwd = os.getcwd()
    os.chdir(other)  # whatever the current folder
    try:
        res = Resource(load_external(Path(os.path.relpath(folder, other)))).make()
        try:
            snap = res.probe()
        finally:
            res.remove()
    finally:
        os.chdir(cwd)
    assert snap["records"]["here"]["it"]["cwd"] == str(res.root)


def test_a_failing_probe_names_its_field_and_shows_its_stderr_redacted(tmp_path: Path, monkeypatch) -> None:
    from aft_bench.cli.main import main

    monkeypatch.setenv("MY_SERVICE_API_KEY", "sk-live-0123456789abcdef")
    folder = _world(tmp_path, 'command = ["sh", "-c", "echo \\"cannot open db: key sk-live-0123456789abcdef\\" >&2; '
                              'exit 3"]')
    with pytest.raises(InputError) as err:
        from aft_bench.cli.scorecard import live_check

        live_check(load_external(folder), folder / "world.toml")
    said = str(err.value)
    assert "field 'probe.command'" in said and "exited 3: cannot open db" in said
    assert "sk-live-0123456789abcdef" not in said
    assert main(["validate", "--live", str(folder)]) == 2


@pytest.mark.parametrize(("text", "said"), [
    (b'{"type": "entity", "name": "A"}\n[1, 2]\n', "memory.jsonl line 2 is not an object"),
    (b'{"type": "entity", "name": "A"\n', "memory.jsonl line 1 is not JSON"),
    (b"[" * 100000 + b"]" * 100000 + b"\n", "memory.jsonl line 1: JSON nested too deep to read (200000 bytes)"),
    # JSON that parses but that no writer of evidence could keep (issue 48's rerun): each is the probe's failure
    (b"[" * 300 + b"]" * 300 + b"\n", "memory.jsonl line 1: JSON nested more than 200 levels deep"),
    (b'{"type": "entity", "name": "\\ud800"}\n', "memory.jsonl line 1: holds text that is not valid Unicode"),
    (b'{"type": "entity", "name": "A", "n": NaN}\n', "memory.jsonl line 1: holds NaN, which JSON does not have"),
])
def test_a_damaged_jsonl_resource_is_an_error_naming_the_file_and_line(text: bytes, said: str,
                                                                       tmp_path: Path) -> None:
    (tmp_path / "memory.jsonl").write_bytes(text)
    for builtin in ("jsonl_graph", "jsonl") if "object" not in said else ("jsonl_graph",):  # jsonl keeps [1, 2]
        with pytest.raises(ResourceFailed) as err:
            probe(Probe(builtin=builtin, path="memory.jsonl"), tmp_path, {}, "memory")
        assert str(err.value).startswith("world 'memory': probe failed: memory.jsonl line")
        assert str(tmp_path) not in str(err.value)
        if builtin == "jsonl_graph":
            assert said in str(err.value)


def test_odd_but_readable_jsonl_lines_are_read_as_they_are(tmp_path: Path) -> None:
    (tmp_path / "memory.jsonl").write_bytes(b'{"type": "entity", "name": "A\xff", "observations": 3}\n')
    ents = probe(Probe(builtin="jsonl_graph", path="memory.jsonl"), tmp_path, {}, "w")["records"]["entities"]
    assert ents == {"A\ufffd": {"name": "A\ufffd", "entityType": None, "observations": 3}}


@pytest.mark.parametrize("kind", ["fifo", "folder"])
@pytest.mark.parametrize("builtin", ["jsonl", "jsonl_graph", "sqlite", "folder"])
def test_a_fifo_or_folder_where_the_probe_reads_a_file_fails_it_at_once(kind: str, builtin: str,
                                                                        tmp_path: Path) -> None:
    """A server that leaves a FIFO where its state file goes would block the reader forever (the rerun's
    probe.fifo-* hung 120 s); a folder there crashed it. Each is the probe's failure naming the file, at once."""
    import os
    import time

    name = "app.db" if builtin == "sqlite" else "notes.txt" if builtin == "folder" else "memory.jsonl"
    os.mkfifo(tmp_path / name) if kind == "fifo" else (tmp_path / name).mkdir()
    t0 = time.monotonic()
    if builtin == "folder":  # the folder probe over one named file: a FIFO is no file (none yet), a folder neither
        snap = probe(Probe(builtin="folder", path=name), tmp_path, {}, "w")
        assert snap == {"records": {"files": {}}} if kind == "fifo" else snap["records"]["files"] == {}
    else:
        with pytest.raises(ResourceFailed) as err:
            probe(Probe(builtin=builtin, path=name), tmp_path, {}, "w")
        what = "a FIFO" if kind == "fifo" else "a folder"
        assert str(err.value) == f"world 'w': probe failed: {name} is {what}, not a file the probe can read"
    assert time.monotonic() - t0 < 5


def test_the_git_probe_runs_nothing_the_repository_configures_and_reads_only_its_own_git_folder(
        tmp_path: Path) -> None:
    """A repository a server wrote may configure programs git would run while it is read (an fsmonitor hook, a
    clean filter) or point its .git elsewhere (a gitdir file to a repository of the user's): the probe runs none
    of them and refuses the second; a commit message holding the log's old record separator is read whole."""
    import subprocess

    repo = tmp_path / "r"
    repo.mkdir()
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]
    subprocess.run([*git, "init", "-q", "-b", "main", str(repo)], check=True)
    (repo / "a.txt").write_text("one\n")
    (repo / ".gitattributes").write_text("*.txt filter=evil\n")
    subprocess.run([*git, "-C", str(repo), "add", "."], check=True)
    subprocess.run([*git, "-C", str(repo), "commit", "-q", "-m", "first\x1esecond half"], check=True)
    ran = tmp_path / "ran"
    hook = f"sh -c 'touch {ran}'"
    with open(repo / ".git" / "config", "a") as fh:
        fh.write(f'[core]\n\tfsmonitor = "{hook}"\n[filter "evil"]\n\tclean = {hook}\n')
    (repo / "a.txt").write_text("two\n")  # a changed file: status would run its clean filter
    snap = probe(Probe(builtin="git"), repo, {}, "g")
    assert not ran.exists()  # neither the hook nor the filter ran
    (msg,) = [c["message"] for c in snap["records"]["commits"].values()]
    assert msg == "first\x1esecond half"
    other = tmp_path / "other"
    other.mkdir()
    (other / ".git").write_text(f"gitdir: {repo / '.git'}\n")
    with pytest.raises(ResourceFailed, match="^world 'g': probe failed: .git is not a folder in the resource"):
        probe(Probe(builtin="git"), other, {}, "g")


def test_a_resource_folder_replaced_by_a_link_is_read_no_further(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "memory.jsonl").write_text('{"type": "entity", "name": "secret-of-the-user"}\n')
    root = tmp_path / "root"
    root.symlink_to(outside)
    with pytest.raises(ResourceFailed, match="replaced by a link"):
        probe(Probe(builtin="jsonl_graph", path="memory.jsonl"), root, {}, "m")
