"""An external world's resource (`world/resource.py`): the fresh folder a world's fixture prepares (its files and
commands, what they see, what a failing one says), the foreign write that stands for another writer, and the
probes that read the real state, each asserted as a whole snapshot on small real inputs under tmp_path: a
repository made with the `git` command, a real SQLite file, real JSON-lines files, folders of text and binary
files; `inside()` and `regular()` refusing what a server may have planted; the exact ResourceFailed text and its
`field`; the memo of one-file probes by the file's bytes. Written for `make mutants`; no server is started."""

from __future__ import annotations

import errno
import gc
import hashlib
import locale
import os
import shutil
import sqlite3
import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import pytest

from aft_bench.common.canonical import canonical_json
from aft_bench.common.scratch import scratch_dir
from aft_bench.world import resource
from aft_bench.world.external import ExternalWorld, Fixture, Probe, Server, load_external
from aft_bench.world.resource import TEXT_MAX, Resource, ResourceFailed, _filters, check_snapshot, inside, probe, \
    probe_folder, probe_git, probe_jsonl, probe_jsonl_graph, probe_sqlite, regular

GIT_CMD = ["git", "-c", "user.name=T", "-c", "user.email=t@example.invalid", "-c", "commit.gpgsign=false"]
GIT_DATES = {"GIT_AUTHOR_DATE": "1767225600 +0000", "GIT_COMMITTER_DATE": "1767225600 +0000",
             "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull}


def sha(data: bytes | str) -> str:
    return hashlib.sha256(data.encode() if isinstance(data, str) else data).hexdigest()


def text_rec(text: str) -> dict[str, Any]:
    """What a probe records for a small UTF-8 file."""
    return {"sha256": sha(text), "size": len(text.encode()), "text": text}


def world(*, fixture: Fixture | None = None, foreign: tuple[tuple[str, ...], ...] = (),
          probe_spec: Probe | None = None, version: str = "1.2.3") -> ExternalWorld:
    """A world made in code (no world file, so `{world}` names nothing)."""
    return ExternalWorld(kind="mcp_stdio", id="w", server=Server(package="p", version=version, command=("srv",)),
                         fixture=fixture or Fixture(), probe=probe_spec or Probe(builtin="folder"),
                         foreign=foreign, tools={"t": {"effect": "read"}})  # type: ignore[dict-item]


def git(repo: Path, *args: str) -> str:
    return subprocess.run([*GIT_CMD, *args], cwd=repo, env={**os.environ, **GIT_DATES}, check=True,
                          capture_output=True, text=True).stdout.strip()


def new_repo(repo: Path, *init: str) -> Path:
    repo.mkdir(parents=True, exist_ok=True)
    git(repo, "init", "-q", "-b", "main", *init)
    return repo


def failure(call: Any, *args: Any) -> ResourceFailed:
    with pytest.raises(ResourceFailed) as err:
        call(*args)
    return err.value


# --- the resource folder, its fixture and the foreign write --------------------------------------------------------

def test_the_resource_folder_is_fresh_absolute_and_named_after_the_world(tmp_path: Path) -> None:
    """The server, the probe and the gateway would see different paths for one folder (a link in its parent)."""
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "via").symlink_to(real)
    a, b = Resource(world(), tmp_path / "via"), Resource(world(), real)
    assert a.root.parent == real and b.root.parent == real and a.root != b.root
    assert a.root.name.startswith("aft-w-") and a.root.is_dir() and list(a.root.iterdir()) == []
    c = Resource(world())  # no parent: the command's own scratch folder
    try:
        assert c.root.parent == Path(os.path.realpath(scratch_dir())) and c.root.name.startswith("aft-w-")
    finally:
        c.remove()
    a.remove()
    a.remove()  # idempotent
    assert not a.root.exists() and b.root.is_dir()


def test_the_fixture_writes_its_files_then_runs_its_commands_with_its_environment(tmp_path: Path,
                                                                                   monkeypatch) -> None:
    """A world's episodes would start from the wrong state: files missing, commands run elsewhere or without the
    fixture's environment (`{root}`, `{version}` expanded; the fixture's values over the harness's own)."""
    monkeypatch.setenv("AFT_TEST_SHARED", "outer")
    monkeypatch.setenv("AFT_TEST_KEPT", "kept")
    fx = Fixture(files={"b/c/deep.txt": "ünïcode\n", "a.txt": "first\n"},
                 commands=(("sh", "-c", 'printf "%s|%s|%s|%s" "$AFT_TEST_SHARED" "$AFT_TEST_KEPT" "$WHERE" "$PWD" '
                                        "> env.out"),
                           ("cp", "a.txt", "{root}/copy-{version}.txt")),
                 env={"AFT_TEST_SHARED": "inner", "WHERE": "{root}/x-{version}"})
    res = Resource(world(fixture=fx), tmp_path)
    assert res.env() == {"AFT_TEST_SHARED": "inner", "WHERE": f"{res.root}/x-1.2.3"}
    assert res.make() is res
    try:
        assert res.probe() == {"records": {
            "files": {"a.txt": text_rec("first\n"), "b/c/deep.txt": text_rec("ünïcode\n"),
                      "copy-1.2.3.txt": text_rec("first\n"),
                      "env.out": text_rec(f"inner|kept|{res.root}/x-1.2.3|{res.root}")},
            "dirs": {"b": {"dir": True}, "b/c": {"dir": True}}}}
        assert (res.root / "b" / "c" / "deep.txt").read_bytes() == "ünïcode\n".encode("utf-8")
    finally:
        res.remove()


def test_a_failing_fixture_command_says_which_and_how_and_leaves_no_folder(tmp_path: Path) -> None:
    """A broken world would leave folders behind, or fail with no word of the command, its status or its stderr."""
    loud = ("sh", "-c", "echo one >&2; echo two >&2; echo three >&2; echo four >&2; exit 4")
    res = Resource(world(fixture=Fixture(files={"a.txt": "x"}, commands=(("true",), loud, ("touch", "never")))),
                   tmp_path)
    err = failure(res.make)
    assert str(err) == ("world 'w': fixture command 'sh -c echo one >&2; echo two >&2; echo three >&2; echo four "
                        ">&2; exit 4' exited 4: two / three / four")
    assert err.field == "fixture.commands" and not res.root.exists()
    missing = Resource(world(fixture=Fixture(commands=(("no-such-program-aft",),))), tmp_path)
    err = failure(missing.make)
    assert str(err) == ("world 'w': fixture command 'no-such-program-aft' failed: [Errno 2] No such file or "
                        "directory: 'no-such-program-aft'")
    assert err.field == "fixture.commands" and not missing.root.exists()
    assert list(tmp_path.iterdir()) == []


def test_a_failing_commands_stderr_is_its_last_three_lines_cut_and_redacted(tmp_path: Path, monkeypatch) -> None:
    """An error would print a whole log, a key a server printed, a crash on bytes that are not UTF-8, or nothing."""
    monkeypatch.setenv("MY_SERVICE_API_KEY", "sk-live-0123456789abcdef")
    res = Resource(world(), tmp_path)
    try:
        long = "x" * 400
        cases = [("exit 1", "nothing on stderr"),
                 ("printf '\\n\\n  \\n' >&2; exit 1", "nothing on stderr"),
                 (f"printf '{long}' >&2; exit 1", "x" * 300),
                 ("printf '  key sk-live-0123456789abcdef  \\n' >&2; exit 1", "key [redacted]"),
                 ("printf 'bad \\377 byte' >&2; exit 1", "bad \ufffd byte")]
        for script, said in cases:
            err = failure(res.run, ("sh", "-c", script), "fixture", "fixture.commands")
            assert str(err) == f"world 'w': fixture command {'sh -c ' + script!r} exited 1: {said}"
        assert res.run(("sh", "-c", "printf 'out \\377'"), "fixture", "fixture.commands") == "out \ufffd"
        assert res.run(("sh", "-c", "printf '%s' {root}"), "fixture", "fixture.commands") == str(res.root)
    finally:
        res.remove()


def test_the_foreign_write_runs_every_command_in_order_and_names_its_field(tmp_path: Path) -> None:
    """Stale state would never be staged (another writer's change missing), or its failure blamed on the probe."""
    res = Resource(world(fixture=Fixture(files={"a.txt": "mine\n"}),
                         foreign=(("sh", "-c", "printf 'theirs\\n' >> a.txt"), ("cp", "a.txt", "b.txt"))),
                   tmp_path).make()
    try:
        before = res.probe()
        assert before == {"records": {"files": {"a.txt": text_rec("mine\n")}, "dirs": {}}}
        assert res.foreign_write() is None
        assert res.probe() == {"records": {"files": {"a.txt": text_rec("mine\ntheirs\n"),
                                                     "b.txt": text_rec("mine\ntheirs\n")}, "dirs": {}}}
        broken = Resource(world(foreign=(("sh", "-c", "echo no remote >&2; exit 2"),)), tmp_path).make()
        err = failure(broken.foreign_write)
        assert str(err) == "world 'w': foreign write command 'sh -c echo no remote >&2; exit 2' exited 2: no remote"
        assert err.field == "foreign" and broken.root.is_dir()  # the episode's folder stays: the episode removes it
        broken.remove()
    finally:
        res.remove()


def test_a_world_files_probe_and_environment_name_its_own_folder_and_the_resource(tmp_path: Path) -> None:
    """A probe script kept beside world.toml would not be found, or would read another folder than the resource;
    `{version}` is the server's in the probe's command as in the fixture's (it expanded to nothing there)."""
    folder = tmp_path / "world"
    folder.mkdir()
    (folder / "dump.sh").write_text('printf \'{"records": {"seen": {"it": {"arg": "%s", "env": "%s", "pwd": "%s"}}}}\' '
                                    '"$1" "$SEEN" "$PWD"\n')
    (folder / "world.toml").write_text(
        'kind = "mcp_stdio"\nid = "wf"\n[server]\npackage = "p"\nversion = "9"\ncommand = ["srv"]\n'
        '[fixture]\nenv = { SEEN = "{world}|{version}" }\ncommands = [["cp", "{world}/seed.txt", "seed.txt"]]\n'
        '[probe]\ncommand = ["sh", "{world}/dump.sh", "{root}:{version}"]\n[tools.t]\neffect = "read"\n')
    (folder / "seed.txt").write_text("seed\n")
    res = Resource(load_external(folder), tmp_path).make()
    try:
        assert res.root.name.startswith("aft-wf-")
        assert res.env() == {"SEEN": f"{folder}|9"}
        assert res.probe() == {"records": {"seen": {"it": {"arg": f"{res.root}:9", "env": f"{folder}|9",
                                                           "pwd": str(res.root)}}}}
        assert (res.root / "seed.txt").read_text() == "seed\n"
    finally:
        res.remove()


# --- the command probe and check_snapshot ----------------------------------------------------------------------------

@pytest.mark.parametrize(("command", "said"), [
    (("no-such-probe-aft",), "cannot run 'no-such-probe-aft': No such file or directory"),
    (("sh", "-c", "echo locked >&2; exit 3"), "'sh' exited 3: locked"),
    (("sh", "-c", "echo hi"), "'sh' printed something other than JSON: 'hi\\n'"),
    (("sh", "-c", "printf 'bad \\377'"), "'sh' printed something other than JSON: 'bad \ufffd'"),
    (("sh", "-c", "printf 'y%.0s' $(seq 100)"), "'sh' printed something other than JSON: '" + "y" * 60 + "'"),
    (("sh", "-c", "echo '{\"records\": {\"a\": {\"b\": {\"c\": NaN}}}}'"),
     "'sh' printed JSON the harness cannot keep: holds NaN, which JSON does not have"),
    (("sh", "-c", "echo '[1]'"), "printed JSON without a 'records' object"),
    (("sleep", "5"), "'sleep' did not finish within 0.25 s"),
])
def test_a_command_probe_that_fails_says_how_under_the_field_probe_command(command: tuple[str, ...], said: str,
                                                                          tmp_path: Path) -> None:
    """`validate --live` would name no field, or hide why the probe failed (missing, crashed, no JSON, hung)."""
    err = failure(probe, Probe(command=command, timeout_s=0.25), tmp_path, {}, "w")
    assert str(err) == f"world 'w': probe failed: {said}" and err.field == "probe.command"


def test_a_command_probe_runs_in_the_resource_with_the_environment_given(tmp_path: Path, monkeypatch) -> None:
    """A probe would read the harness's folder or miss the fixture's environment (where a server keeps its state)."""
    monkeypatch.setenv("AFT_TEST_SHARED", "outer")
    spec = Probe(command=("sh", "-c", 'printf \'{"records": {"r": {"k": {"pwd": "%s", "v": "%s", "arg": "%s"}}}}\' '
                                      '"$PWD" "$AFT_TEST_SHARED" "$0"', "{root}"))
    assert probe(spec, tmp_path, {"AFT_TEST_SHARED": "inner"}, "w") == {
        "records": {"r": {"k": {"pwd": str(tmp_path), "v": "inner", "arg": str(tmp_path)}}}}


def test_check_snapshot_keeps_a_canonical_copy_and_names_what_is_malformed() -> None:
    """A malformed probe output would crash the judge later, or a tuple/unsorted keys make two equal states differ."""
    good = {"records": {"c": {"k": {"v": (1, 2), "a": 2.0}}, "empty": {}}}
    out = check_snapshot(good)
    assert out == {"records": {"c": {"k": {"a": 2.0, "v": [1, 2]}}, "empty": {}}}
    assert list(out["records"]["c"]["k"]) == ["a", "v"] and out is not good
    assert isinstance(out["records"]["c"]["k"]["a"], float)
    for bad, said in [([1], "printed JSON without a 'records' object"),
                      ({"no": {}}, "printed JSON without a 'records' object"),
                      ({"records": []}, "printed JSON without a 'records' object"),
                      ({"records": {"c": []}}, "collection 'c' is not an object of records (objects)"),
                      ({"records": {"ok": {}, "c": {"a": {}, "k": 1}}},
                       "collection 'c' is not an object of records (objects)"),
                      ({"records": {"c": {"k": {"v": float("nan")}}}},
                       "gave a value that is not canonical JSON: Out of range float values are not JSON compliant"),
                      ({"records": {"c": {"k": {"v": {1}}}}},
                       "gave a value that is not canonical JSON: Object of type set is not JSON serializable")]:
        err = failure(check_snapshot, bad)
        assert str(err) == said and err.field == "probe"


# --- inside() and regular() -------------------------------------------------------------------------------------------

def test_inside_resolves_paths_in_the_resource_and_refuses_every_way_out(tmp_path: Path) -> None:
    """A probe would read a file of the user's through a link a server planted, or through a replaced folder."""
    root = tmp_path / "root"
    (root / "sub").mkdir(parents=True)
    (root / "sub" / "f.txt").write_text("x")
    (root / "alias").symlink_to(root / "sub")
    (root / "out").symlink_to(tmp_path)
    assert inside(root, ".") == root and inside(root, "") == root
    assert inside(root, "sub/f.txt") == root / "sub" / "f.txt"
    assert inside(root, "not/yet.txt") == root / "not" / "yet.txt"
    assert inside(root, "alias/f.txt") == root / "sub" / "f.txt"  # a link within the resource: its target
    assert inside(root, "out/root/sub") == root / "sub"  # out and back in: where it leads is what counts
    for rel in ("out", "out/elsewhere.txt", "../root-sibling", "/etc/passwd"):
        err = failure(inside, root, rel)
        assert str(err) == f"{rel!r} leads outside the resource" and err.field == "probe"
    (tmp_path / "root-link").symlink_to(root)
    assert str(failure(inside, tmp_path / "root-link", ".")) == \
        "the resource folder was replaced by a link to somewhere else"
    (tmp_path / "loop").symlink_to("loop")  # a link to itself resolves to its own path: a link all the same
    assert str(failure(inside, tmp_path / "loop", "memory.jsonl")) == \
        "the resource folder was replaced by a link to somewhere else"
    err = failure(probe, Probe(builtin="folder", path="out"), root, {}, "w")
    assert str(err) == "world 'w': probe failed: 'out' leads outside the resource" and err.field == "probe.folder"


def test_regular_is_a_plain_file_none_yet_or_a_failure_naming_what_is_there(tmp_path: Path) -> None:
    """A probe would block forever on a FIFO, crash on a folder or device, or fail where there is no file yet."""
    (tmp_path / "f.txt").write_text("x")
    (tmp_path / "d").mkdir()
    os.mkfifo(tmp_path / "p")
    (tmp_path / "link").symlink_to(tmp_path / "f.txt")
    assert regular(tmp_path / "f.txt") is True and regular(tmp_path / "link") is True
    assert regular(tmp_path / "missing") is False
    for path, said in [(tmp_path / "d", "d is a folder, not a file the probe can read"),
                       (tmp_path / "p", "p is a FIFO, not a file the probe can read"),
                       (Path(os.devnull), "null is not a regular file, not a file the probe can read"),
                       (tmp_path / "f.txt" / "x", "x: Not a directory")]:
        err = failure(regular, path)
        assert str(err) == said and err.field == "probe"


# --- the folder probe -------------------------------------------------------------------------------------------------

def test_the_folder_probe_records_every_file_link_and_folder_exactly(tmp_path: Path) -> None:
    """A changed file, a new folder or a planted link would go unseen, or a large/binary file's bytes be shown."""
    edge, big, binary = "e" * TEXT_MAX, "b" * (TEXT_MAX + 1), b"\xff\x00\xfe"
    (tmp_path / "sub" / "deeper").mkdir(parents=True)
    (tmp_path / "empty").mkdir()
    (tmp_path / "a.txt").write_text("alpha\n")
    (tmp_path / "edge.txt").write_text(edge)
    (tmp_path / "big.txt").write_text(big)
    (tmp_path / "bin.dat").write_bytes(binary)
    (tmp_path / "nothing.txt").write_bytes(b"")
    (tmp_path / "sub" / "inner.md").write_text("ünï\n")
    (tmp_path / "sub" / "deeper" / "z.txt").write_text("z")
    (tmp_path / "link").symlink_to("a.txt")
    (tmp_path / "dangling").symlink_to("/nowhere/at/all")
    os.mkfifo(tmp_path / "fifo")  # neither a file nor a link: not recorded
    want = {"records": {
        "files": {"a.txt": text_rec("alpha\n"), "edge.txt": text_rec(edge),
                  "big.txt": {"sha256": sha(big), "size": TEXT_MAX + 1},
                  "bin.dat": {"sha256": sha(binary), "size": 3},
                  "nothing.txt": {"sha256": sha(b""), "size": 0, "text": ""},
                  "sub/inner.md": text_rec("ünï\n"), "sub/deeper/z.txt": text_rec("z"),
                  "link": {"symlink": "a.txt"}, "dangling": {"symlink": "/nowhere/at/all"}},
        "dirs": {"empty": {"dir": True}, "sub": {"dir": True}, "sub/deeper": {"dir": True}}}}
    assert probe_folder(tmp_path, {}, 5) == want
    assert probe(Probe(builtin="folder"), tmp_path, {}, "w") == want
    assert probe(Probe(builtin="folder", path="sub"), tmp_path, {}, "w") == {"records": {
        "files": {"inner.md": text_rec("ünï\n"), "deeper/z.txt": text_rec("z")}, "dirs": {"deeper": {"dir": True}}}}


def test_the_folder_probe_over_one_file_reads_it_alone(tmp_path: Path) -> None:
    """A world that watches one file would see its neighbours, miss it in a subfolder, or fail before it exists."""
    spec = Probe(builtin="folder", path="notes/todo.txt")
    assert probe(spec, tmp_path, {}, "w") == {"records": {"files": {}}}
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "todo.txt").write_bytes(b"\xff" * 10)
    (tmp_path / "notes" / "other.txt").write_text("not read")
    assert probe(spec, tmp_path, {}, "w") == {"records": {"files": {"notes/todo.txt": {"sha256": sha(b"\xff" * 10),
                                                                                        "size": 10}}}}
    assert probe_folder(tmp_path / "notes" / "todo.txt", {}, 5, spec) == probe(spec, tmp_path, {}, "w")


def test_the_folder_probe_of_a_resource_that_is_not_a_folder_fails(tmp_path: Path) -> None:
    """A vanished resource would read as an empty one: every file 'deleted', no error."""
    gone = tmp_path / "gone"
    assert str(failure(probe_folder, gone, {}, 5)) == ". is not a folder in the resource"
    assert str(failure(probe_folder, gone, {}, 5, Probe(builtin="folder"))) == ". is not a folder in the resource"
    assert str(failure(probe_folder, gone, {}, 5, Probe(builtin="folder", path=""))) == \
        " is not a folder in the resource"
    err = failure(probe, Probe(builtin="folder"), gone, {}, "w")
    assert str(err) == "world 'w': probe failed: . is not a folder in the resource" and err.field == "probe.folder"


# --- the sqlite probe -------------------------------------------------------------------------------------------------

def test_the_sqlite_probe_reads_the_schema_and_every_tables_rows_exactly(tmp_path: Path) -> None:
    """A row, a blob, a table with an odd name, a view or trigger would go unseen, or SQLite's own tables leak in."""
    db = tmp_path / "app.db"
    con = sqlite3.connect(db)
    ddl = {"notes": "CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT, raw BLOB, score REAL)",
           "tags": "CREATE TABLE tags (name TEXT PRIMARY KEY, n INT) WITHOUT ROWID",
           "seq": "CREATE TABLE seq (id INTEGER PRIMARY KEY AUTOINCREMENT, v TEXT UNIQUE)",
           'we"ird': 'CREATE TABLE "we""ird" (x)',
           "ix_body": "CREATE INDEX ix_body ON notes (body)",
           "v_notes": "CREATE VIEW v_notes AS SELECT body FROM notes",
           "tr": "CREATE TRIGGER tr AFTER INSERT ON notes BEGIN SELECT 1; END"}
    for sql in ddl.values():
        con.execute(sql)
    con.execute("INSERT INTO notes (body, raw, score) VALUES ('hello', x'00ff', 2.0), (NULL, NULL, 0.5)")
    con.execute("INSERT INTO tags VALUES ('b', 2), ('a', 1)")
    con.execute("INSERT INTO seq (v) VALUES ('one')")
    con.execute('INSERT INTO "we""ird" VALUES (7)')
    con.commit()
    con.close()
    tag_a, tag_b = {"name": "a", "n": 1}, {"name": "b", "n": 2}
    want = {"records": {
        "sqlite_master": {
            "notes": {"type": "table", "table": "notes", "sql": ddl["notes"]},
            "tags": {"type": "table", "table": "tags", "sql": ddl["tags"]},
            "seq": {"type": "table", "table": "seq", "sql": ddl["seq"]},
            "sqlite_sequence": {"type": "table", "table": "sqlite_sequence",
                                "sql": "CREATE TABLE sqlite_sequence(name,seq)"},
            "sqlite_autoindex_seq_1": {"type": "index", "table": "seq", "sql": None},
            'we"ird': {"type": "table", "table": 'we"ird', "sql": ddl['we"ird']},
            "ix_body": {"type": "index", "table": "notes", "sql": ddl["ix_body"]},
            "v_notes": {"type": "view", "table": "v_notes", "sql": ddl["v_notes"]},
            "tr": {"type": "trigger", "table": "notes", "sql": ddl["tr"]}},
        "notes": {"1": {"id": 1, "body": "hello", "raw": {"blob": "00ff"}, "score": 2.0},
                  "2": {"id": 2, "body": None, "raw": None, "score": 0.5}},
        "tags": {canonical_json(tag_a): tag_a, canonical_json(tag_b): tag_b},
        "seq": {"1": {"id": 1, "v": "one"}},
        'we"ird': {"1": {"x": 7}}}}
    got = probe(Probe(builtin="sqlite", path="app.db"), tmp_path, {}, "w")
    assert got == want and isinstance(got["records"]["notes"]["1"]["score"], float)
    assert probe_sqlite(db, {}, 5) == want
    assert probe_sqlite(tmp_path / "none.db", {}, 5) == {"records": {"sqlite_master": {}}}


def test_the_sqlite_probe_reads_a_database_held_open_in_wal_mode_anew_each_time(tmp_path: Path) -> None:
    """A server that keeps its database open (WAL: the main file unchanged) would seem never to write anything."""
    db = tmp_path / "app.db"
    con = sqlite3.connect(db)
    try:
        con.execute("PRAGMA journal_mode=WAL")
        con.execute("CREATE TABLE t (v)")
        con.execute("INSERT INTO t VALUES ('one')")
        con.commit()
        spec = Probe(builtin="sqlite", path="app.db")
        assert probe(spec, tmp_path, {}, "w")["records"]["t"] == {"1": {"v": "one"}}
        main = db.read_bytes()
        con.execute("INSERT INTO t VALUES ('two')")
        con.commit()
        assert db.read_bytes() == main  # the write is in the WAL only
        assert probe(spec, tmp_path, {}, "w")["records"]["t"] == {"1": {"v": "one"}, "2": {"v": "two"}}
    finally:
        con.close()


def test_a_file_that_is_not_a_database_fails_the_sqlite_probe_naming_it(tmp_path: Path) -> None:
    """A damaged database would crash the run with SQLite's bare error, or read as empty."""
    (tmp_path / "app.db").write_text("not a database at all, " * 10)
    err = failure(probe, Probe(builtin="sqlite", path="app.db"), tmp_path, {}, "w")
    assert str(err) == "world 'w': probe failed: app.db: file is not a database" and err.field == "probe.sqlite"


# --- the JSON-lines probes --------------------------------------------------------------------------------------------

def test_the_jsonl_probe_keys_each_line_by_its_first_naming_field_else_its_digest(tmp_path: Path) -> None:
    """Two different lines would collapse into one record, a repeated one go uncounted, or keys change between runs."""
    lines = ['{"id": 7, "text": "a"}', '{"id": 7, "text": "a"}', '{"id": "7", "text": "b"}',
             '{"name": "n", "id": 3}', '{"name": "n2", "key": "k"}', '{"key": "k2", "uuid": "u"}',
             '{"uuid": "u2"}', '{"id": {"x": 1}, "name": "fallback"}', '{"id": [1], "text": "t"}', '42',
             '"s"', "", "   ", '{"id": false}']
    (tmp_path / "log.jsonl").write_text("\n".join(lines) + "\n")

    def digest(rec: dict[str, Any]) -> str:
        return sha(canonical_json(rec))[:16]

    want = {"7": {"id": 7, "text": "a"}, "7#2": {"id": 7, "text": "a"}, "7#3": {"id": "7", "text": "b"},
            "3": {"name": "n", "id": 3}, "n2": {"name": "n2", "key": "k"}, "k2": {"key": "k2", "uuid": "u"},
            "u2": {"uuid": "u2"}, "fallback": {"id": {"x": 1}, "name": "fallback"},
            digest({"id": [1], "text": "t"}): {"id": [1], "text": "t"},
            digest({"value": 42}): {"value": 42}, digest({"value": "s"}): {"value": "s"},
            "False": {"id": False}}
    assert probe(Probe(builtin="jsonl", path="log.jsonl"), tmp_path, {}, "w") == {"records": {"lines": want}}
    by_text = probe(Probe(builtin="jsonl", path="log.jsonl", key="text"), tmp_path, {}, "w")["records"]["lines"]
    assert by_text == {
        "a": {"id": 7, "text": "a"}, "a#2": {"id": 7, "text": "a"}, "b": {"id": "7", "text": "b"},
        "t": {"id": [1], "text": "t"},
        **{digest(r): r for r in ({"name": "n", "id": 3}, {"name": "n2", "key": "k"}, {"key": "k2", "uuid": "u"},
                                  {"uuid": "u2"}, {"id": {"x": 1}, "name": "fallback"}, {"value": 42},
                                  {"value": "s"}, {"id": False})}}
    assert probe_jsonl(tmp_path / "none.jsonl", {}, 5) == {"records": {"lines": {}}}
    assert probe_jsonl(tmp_path / "log.jsonl", {}, 5)["records"]["lines"] == want


def test_the_graph_probe_reads_entities_and_relations_and_counts_repeats(tmp_path: Path) -> None:
    """A duplicate entity or relation would go uncounted, a line of another type be read as one, or a missing
    observations list differ from an empty one."""
    lines = ['{"type": "entity", "name": "Ann", "entityType": "person", "observations": ["likes tea"]}',
             '{"type": "entity", "name": "Ann", "entityType": "person", "observations": ["likes tea"]}',
             '{"type": "entity", "name": "Ann", "entityType": "robot"}',
             '{"type": "entity", "name": 5, "observations": null, "extra": 1}',
             '', '{"type": "relation", "from": "Ann", "to": "Bob", "relationType": "knows", "extra": 1}',
             '{"type": "relation", "from": "Ann", "to": "Bob", "relationType": "knows"}',
             '{"type": "relation", "from": "Bob", "to": "Ann", "relationType": "knows"}',
             '{"type": "note", "name": "ignored"}', '{"name": "no type"}']
    (tmp_path / "memory.jsonl").write_text("\n".join(lines) + "\n")
    ann = {"name": "Ann", "entityType": "person", "observations": ["likes tea"]}
    knows = {"from": "Ann", "to": "Bob", "relationType": "knows"}
    want = {"records": {
        "entities": {"Ann": ann, "Ann#2": ann, "Ann#3": {"name": "Ann", "entityType": "robot", "observations": []},
                     "5": {"name": 5, "entityType": None, "observations": []}},
        "relations": {"Ann|knows|Bob": knows, "Ann|knows|Bob#2": knows,
                      "Bob|knows|Ann": {"from": "Bob", "to": "Ann", "relationType": "knows"}}}}
    assert probe(Probe(builtin="jsonl_graph", path="memory.jsonl"), tmp_path, {}, "w") == want
    assert probe_jsonl_graph(tmp_path / "none.jsonl", {}, 5) == {"records": {"entities": {}, "relations": {}}}
    (tmp_path / "memory.jsonl").write_text(lines[0] + "\n\n42\n")
    err = failure(probe, Probe(builtin="jsonl_graph", path="memory.jsonl"), tmp_path, {}, "m")
    assert str(err) == "world 'm': probe failed: memory.jsonl line 3 is not an object" and \
        err.field == "probe.jsonl_graph"


def test_a_damaged_jsonl_line_is_named_by_its_number_counting_blank_lines(tmp_path: Path) -> None:
    """A user would be sent to the wrong line of a large state file, or shown the harness's own folder."""
    (tmp_path / "log.jsonl").write_text('{"id": 1}\n\n{"id": 2\n')
    err = failure(probe, Probe(builtin="jsonl", path="log.jsonl"), tmp_path, {}, "w")
    assert str(err) == "world 'w': probe failed: log.jsonl line 3 is not JSON" and err.field == "probe.jsonl"
    (tmp_path / "log.jsonl").write_text('{"id": 1}\n\n\n{"id": NaN}\n')
    err = failure(probe, Probe(builtin="jsonl", path="log.jsonl"), tmp_path, {}, "w")
    assert str(err) == "world 'w': probe failed: log.jsonl line 4: holds NaN, which JSON does not have"


def test_one_file_probes_are_remembered_by_probe_and_bytes_and_the_memo_stays_small(tmp_path: Path) -> None:
    """The same bytes read by two probes would give one's snapshot to the other, or the memo grow without bound."""
    f = tmp_path / "m.jsonl"
    f.write_text('{"type": "entity", "name": "a", "observations": []}\n')
    flat = Probe(builtin="jsonl", path="m.jsonl")
    graph = Probe(builtin="jsonl_graph", path="m.jsonl")
    line = {"type": "entity", "name": "a", "observations": []}
    assert probe(flat, tmp_path, {}, "w") == {"records": {"lines": {"a": line}}}
    assert probe(graph, tmp_path, {}, "w") == {"records": {"entities": {"a": {"name": "a", "entityType": None,
                                                                               "observations": []}},
                                                          "relations": {}}}
    assert probe(flat, tmp_path, {}, "w") == {"records": {"lines": {"a": line}}}  # remembered, still its own
    assert (flat.model_dump_json(), sha(f.read_bytes())) in resource._READ
    resource._READ.clear()
    keys = []
    for i in range(resource.READ_KEPT + 2):
        f.write_text(f'{{"id": {i}}}\n')
        assert probe(flat, tmp_path, {}, "w") == {"records": {"lines": {str(i): {"id": i}}}}
        keys.append((flat.model_dump_json(), sha(f.read_bytes())))
    assert list(resource._READ) == keys[-resource.READ_KEPT:]
    (tmp_path / "app.db").write_bytes(b"")
    probe(Probe(builtin="sqlite", path="app.db"), tmp_path, {}, "w")
    probe(Probe(builtin="folder"), tmp_path, {}, "w")
    assert list(resource._READ) == keys[-resource.READ_KEPT:]  # only one-file probes are remembered


# --- the git probe ----------------------------------------------------------------------------------------------------

def test_the_git_probe_reads_commits_branches_head_staged_and_files_exactly(tmp_path: Path) -> None:
    """A commit, its parents, an empty commit, a staged change or a work-tree file would be misread, so a goal over
    a real repository would be judged wrong."""
    repo = new_repo(tmp_path / "repo")
    (repo / "a.txt").write_text("one\n")
    (repo / "gone.txt").write_text("bye\n")
    (repo / "kept.txt").write_text("kept\n")
    (repo / ".gitignore").write_text("*.log\n")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "Title line\n\nBody line\n")
    root_c = git(repo, "rev-parse", "HEAD")
    git(repo, "commit", "-q", "--allow-empty", "-m", "nothing")
    empty_c = git(repo, "rev-parse", "HEAD")
    git(repo, "checkout", "-q", "-b", "feature")
    (repo / "f.txt").write_text("feature\n")
    git(repo, "add", "f.txt")
    git(repo, "commit", "-q", "-m", "feature work on X")
    feat_c = git(repo, "rev-parse", "HEAD")
    git(repo, "checkout", "-q", "main")
    git(repo, "merge", "-q", "--no-ff", "-m", "merge feature", "feature")
    merge_c = git(repo, "rev-parse", "HEAD")
    (repo / "a.txt").write_text("two\n")
    (repo / "new.txt").write_text("new\n")
    git(repo, "add", "a.txt", "new.txt")
    git(repo, "rm", "-q", "gone.txt")
    (repo / "kept.txt").unlink()  # deleted in the work tree only: still in the index, no file
    (repo / "untracked.bin").write_bytes(b"\x00\xff")
    (repo / "debug.log").write_text("ignored\n")
    (repo / "link").symlink_to("a.txt")
    tree = {c: git(repo, "rev-parse", f"{c}^{{tree}}") for c in (root_c, empty_c, feat_c, merge_c)}
    want = {"records": {
        "commits": {root_c: {"message": "Title line\n\nBody line", "tree": tree[root_c], "parents": [],
                             "empty": False},
                    empty_c: {"message": "nothing", "tree": tree[root_c], "parents": [root_c], "empty": True},
                    feat_c: {"message": "feature work on X", "tree": tree[feat_c], "parents": [empty_c],
                             "empty": False},
                    merge_c: {"message": "merge feature", "tree": tree[merge_c], "parents": [empty_c, feat_c],
                              "empty": False}},
        "branches": {"main": {"commit": merge_c}, "feature": {"commit": feat_c}},
        "head": {"HEAD": {"branch": "main", "commit": merge_c}},
        "staged": {"a.txt": {"status": "M"}, "new.txt": {"status": "A"}, "gone.txt": {"status": "D"}},
        "files": {".gitignore": text_rec("*.log\n"), "a.txt": text_rec("two\n"), "f.txt": text_rec("feature\n"),
                  "new.txt": text_rec("new\n"), "untracked.bin": {"sha256": sha(b"\x00\xff"), "size": 2},
                  "link": {"symlink": "a.txt"}}}}
    assert probe_git(repo, {}, 10) == want
    assert probe(Probe(builtin="git"), repo, {}, "g") == want
    git(repo, "checkout", "-q", "--detach", "feature")
    assert probe_git(repo, {}, 10)["records"]["head"] == {"HEAD": {"branch": None, "commit": feat_c}}


def test_the_git_probe_reads_renames_and_copies_each_by_its_new_path(tmp_path: Path) -> None:
    """A staged rename or copy (a repository that detects copies) would be recorded under its old path."""
    repo = new_repo(tmp_path / "repo")
    git(repo, "config", "diff.renames", "copies")
    (repo / "a.txt").write_text("one\ntwo\nthree\n")
    (repo / "old.txt").write_text("moved\nas it is\n")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "first")
    (repo / "b.txt").write_text("one\ntwo\nthree\n")
    (repo / "a.txt").write_text("one\ntwo\nthree\nfour\n")
    git(repo, "mv", "old.txt", "new name.txt")
    git(repo, "add", ".")
    assert probe_git(repo, {}, 10)["records"]["staged"] == {"a.txt": {"status": "M"}, "b.txt": {"status": "C"},
                                                            "new name.txt": {"status": "R"}}


def test_the_git_probe_reads_head_however_git_spells_it(tmp_path: Path) -> None:
    """HEAD in a SHA-256 repository, an unborn branch, or a HEAD file git accepts but that is not in the plain form
    would be misread as another branch or commit."""
    repo = new_repo(tmp_path / "repo")
    (repo / "a.txt").write_text("one\n")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "first")
    c = git(repo, "rev-parse", "HEAD")
    head = repo / ".git" / "HEAD"
    head.write_text(c.upper() + "\n")  # git reads a commit id in capitals: the probe asks git
    assert probe_git(repo, {}, 10)["records"]["head"]["HEAD"] == {"branch": None, "commit": c}
    head.write_text("ref:refs/heads/main\n")  # no space after "ref:": the probe asks git
    assert probe_git(repo, {}, 10)["records"]["head"]["HEAD"] == {"branch": "main", "commit": c}
    head.write_text("ref: refs/heads/elsewhere\n")  # a branch with no commit yet, in a repository with commits
    assert probe_git(repo, {}, 10)["records"]["head"]["HEAD"] == {"branch": "elsewhere", "commit": None}
    subprocess.run([b"git", b"branch", b"caf\xff", b"main"], cwd=repo, check=True, env={**os.environ, **GIT_DATES})
    head.write_bytes(b"ref: refs/heads/caf\xff\n")  # a branch name git allows that is not UTF-8: git is asked
    recs = probe_git(repo, {}, 10)["records"]
    assert recs["head"] == {"HEAD": {"branch": "caf\ufffd", "commit": c}}
    assert recs["branches"] == {"caf\ufffd": {"commit": c}, "main": {"commit": c}}
    unborn = new_repo(tmp_path / "unborn")
    assert probe_git(unborn, {}, 10) == {"records": {"commits": {}, "branches": {}, "head": {"HEAD": {
        "branch": "main", "commit": None}}, "staged": {}, "files": {}}}
    (unborn / ".git" / "HEAD").write_text("ref:refs/heads/trunk\n")  # git asked, in a repository with no commit
    assert probe_git(unborn, {}, 10)["records"]["head"] == {"HEAD": {"branch": "trunk", "commit": None}}
    wide = new_repo(tmp_path / "wide", "--object-format=sha256")
    (wide / "a.txt").write_text("one\n")
    git(wide, "add", ".")
    git(wide, "commit", "-q", "-m", "first")
    git(wide, "checkout", "-q", "--detach")
    c64 = git(wide, "rev-parse", "HEAD")
    assert len(c64) == 64
    assert probe_git(wide, {}, 10)["records"]["head"]["HEAD"] == {"branch": None, "commit": c64}


def test_the_git_probe_ignores_the_callers_system_and_global_git_configuration(tmp_path: Path) -> None:
    """What the probe reads would depend on the machine's or the user's git configuration, not the repository."""
    repo = new_repo(tmp_path / "repo")
    (repo / "a.txt").write_text("one\ntwo\nthree\n")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "first")
    (repo / "b.txt").write_text("one\ntwo\nthree\n")
    git(repo, "add", ".")
    conf = tmp_path / "copies.gitconfig"
    conf.write_text("[diff]\n\trenames = copies\n")
    for env in ({"GIT_CONFIG_GLOBAL": str(conf)}, {"GIT_CONFIG_SYSTEM": str(conf), "GIT_CONFIG_NOSYSTEM": "0"}):
        assert probe_git(repo, env, 10)["records"]["staged"] == {"b.txt": {"status": "A"}}


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a folder to another user needs root")
def test_the_git_probe_reads_a_repository_another_user_owns(tmp_path: Path) -> None:
    """A server running as another user would leave a repository git refuses to read ('dubious ownership')."""
    repo = new_repo(tmp_path / "repo")
    (repo / "a.txt").write_text("one\n")
    for dirpath, dirnames, filenames in os.walk(repo):
        for name in [dirpath, *(os.path.join(dirpath, n) for n in dirnames + filenames)]:
            os.chown(name, 54321, 54321, follow_symlinks=False)
    assert probe_git(repo, {}, 10)["records"]["files"] == {"a.txt": text_rec("one\n")}


def test_the_git_probe_fails_naming_the_git_command_and_hiding_the_folder(tmp_path: Path) -> None:
    """A folder that is no repository, is gone, or a git that hangs would fail with no word of which git command,
    or print the episode's temporary folder (gone when the error is read)."""
    plain = tmp_path / "plain"
    plain.mkdir()
    err = failure(probe, Probe(builtin="git"), plain, {}, "g")
    assert str(err) == "world 'g': probe failed: git log exited 128: fatal: not a git repository: '<resource>/.git'"
    assert err.field == "probe.git"
    gone = tmp_path / "gone"
    assert str(failure(probe_git, gone, {}, 10)) == f"git log: [Errno 2] No such file or directory: {gone!r}"
    repo = new_repo(tmp_path / "repo")
    (repo / "a.txt").write_text("one\n")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "first")
    heads = os.fsencode(repo / ".git" / "refs" / "heads")
    bad = heads + b"/\xff" + b"y" * 240  # a branch whose commit is missing, its name not UTF-8 and long
    Path(os.fsdecode(bad)).write_text("1" * 40 + "\n")
    said = "fatal: bad object refs/heads/\ufffd" + "y" * 240
    assert str(failure(probe_git, repo, {}, 10)) == f"git log exited 128: {said[:200]}"
    os.unlink(bad)
    (repo / ".git" / "index").unlink()
    os.mkfifo(repo / ".git" / "index")  # git blocks opening it: the probe's deadline ends the wait
    assert str(failure(probe_git, repo, {}, 0.5)) == "git diff: did not finish within 0.5 s"
    link = tmp_path / "link"
    link.mkdir()
    (link / ".git").symlink_to(repo / ".git")
    assert str(failure(probe_git, link, {}, 10)) == \
        ".git is not a folder in the resource (a link or a gitdir file leads elsewhere)"


def test_the_filters_a_repository_names_are_emptied_whatever_its_config_spells(tmp_path: Path) -> None:
    """A clean, smudge or process filter a server configured would run with the user's rights while git reads."""
    repo = tmp_path / "repo"
    assert _filters(repo) == []  # no repository, no config
    (repo / ".git").mkdir(parents=True)
    (repo / ".git" / "config").write_bytes(  # a comment that is not UTF-8 is no reason to skip the filters
        b'# caf\xff\n[core]\n\tbare = false\n  [filter "zeta"]\n\tclean = touch /tmp/x\n[FILTER "Alpha"]\n'
        b'\tprocess = x\n[filter "zeta"]\n\tsmudge = y\n[filter"bad name\n[ filter  "sp ace" ]\n[diff "filter"]\n')
    assert _filters(repo) == ["-c", "filter.Alpha.clean=", "-c", "filter.Alpha.smudge=",
                              "-c", "filter.Alpha.process=",
                              "-c", "filter.sp ace.clean=", "-c", "filter.sp ace.smudge=",
                              "-c", "filter.sp ace.process=",
                              "-c", "filter.zeta.clean=", "-c", "filter.zeta.smudge=", "-c", "filter.zeta.process="]


def test_the_git_probe_reads_the_resources_work_tree_whatever_the_repository_configures(tmp_path: Path) -> None:
    """A repository whose config points its work tree elsewhere would make the probe list another folder's files."""
    repo = new_repo(tmp_path / "repo")
    (repo / "a.txt").write_text("one\n")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "first")
    (repo / "mine.txt").write_text("m")
    other = tmp_path / "other"
    other.mkdir()
    (other / "secret.txt").write_text("s")
    git(repo, "config", "core.worktree", str(other))
    assert probe_git(repo, {}, 10)["records"]["files"] == {"a.txt": text_rec("one\n"), "mine.txt": text_rec("m")}


# --- what the measurement found (each read wrong before) ----------------------------------------------------------

@pytest.mark.parametrize("name", ["a?b.db", "a#b.db", "a%20b.db", "a b.db"])
def test_the_sqlite_probe_reads_a_database_whatever_its_name_holds_and_writes_nothing(name: str,
                                                                                     tmp_path: Path) -> None:
    """A database named with `?` or `#` was read as an empty new file `a` the probe made in the resource."""
    con = sqlite3.connect(tmp_path / name)
    con.execute("CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT)")
    con.execute("INSERT INTO notes (body) VALUES ('kept')")
    con.commit()
    con.close()
    before = sorted(p.name for p in tmp_path.iterdir())
    snap = probe(Probe(builtin="sqlite", path=name), tmp_path, {}, "w")
    assert snap["records"]["notes"] == {"1": {"id": 1, "body": "kept"}}
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_the_folder_probe_records_a_link_to_a_folder_as_a_link(tmp_path: Path) -> None:
    """A folder replaced by a link to somewhere else (/etc) read as an ordinary empty folder."""
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "f.txt").write_text("x")
    os.symlink("/etc", tmp_path / "linkdir")
    os.symlink("real", tmp_path / "inner")
    snap = probe(Probe(builtin="folder"), tmp_path, {}, "w")["records"]
    assert snap["dirs"] == {"real": {"dir": True}}
    assert snap["files"]["linkdir"] == {"symlink": "/etc"} and snap["files"]["inner"] == {"symlink": "real"}
    assert sorted(snap["files"]) == ["inner", "linkdir", "real/f.txt"]



# --- what the third mutation run found (issue 49): each passed the tests before --------------------------------------

@pytest.fixture
def c_locale() -> Any:
    """The C locale a container without locales gives (LANG unset): the default text codec is ASCII there."""
    if sys.flags.utf8_mode:
        pytest.skip("Python's UTF-8 mode ignores the locale's codec")
    old = locale.setlocale(locale.LC_CTYPE)
    locale.setlocale(locale.LC_CTYPE, "C")
    try:
        assert locale.getencoding() == "ANSI_X3.4-1968"
        yield
    finally:
        locale.setlocale(locale.LC_CTYPE, old)


def test_the_resource_writes_and_reads_utf8_whatever_the_users_locale(tmp_path: Path, c_locale: Any) -> None:
    """Under LANG=C a fixture file holding 'é' failed to be written, a JSON-lines state file was read with its
    letters replaced, and a filter named in UTF-8 was not emptied (so it ran while git read)."""
    res = Resource(world(fixture=Fixture(files={"note.txt": "café\n"})), tmp_path).make()
    try:
        assert (res.root / "note.txt").read_bytes() == "café\n".encode("utf-8")
    finally:
        res.remove()
    (tmp_path / "s.jsonl").write_bytes('{"id": "café", "v": "ünï"}\n'.encode("utf-8"))
    assert probe(Probe(builtin="jsonl", path="s.jsonl"), tmp_path, {}, "w") == {
        "records": {"lines": {"café": {"id": "café", "v": "ünï"}}}}
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    (repo / ".git" / "config").write_bytes('[filter "café"]\n\tclean = touch /tmp/x\n'.encode("utf-8"))
    assert _filters(repo) == ["-c", "filter.café.clean=", "-c", "filter.café.smudge=", "-c", "filter.café.process="]


def _git_logged(tmp_path: Path, monkeypatch: Any) -> Path:
    """`git` on PATH is a wrapper that logs each start's arguments, one line each, then runs the real git."""
    real = shutil.which("git")
    assert real is not None
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "git.log"
    (bin_dir / "git").write_text(f'#!/bin/sh\necho "$*" >> {log}\nexec {real} "$@"\n')
    (bin_dir / "git").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return log


def test_a_plain_head_is_read_from_its_file_with_no_git_process_of_its_own(tmp_path: Path, monkeypatch,
                                                                           c_locale: Any) -> None:
    """A probe is four git processes side by side (a scorecard probes dozens of times): a HEAD that names a
    branch, even one named in UTF-8 under LANG=C, or holds a 40- or 64-digit commit id costs no `rev-parse`."""
    repo = new_repo(tmp_path / "repo")
    (repo / "a.txt").write_text("one\n")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "first")
    git(repo, "branch", "café")
    c = git(repo, "rev-parse", "HEAD")
    wide = new_repo(tmp_path / "wide", "--object-format=sha256")
    (wide / "a.txt").write_text("one\n")
    git(wide, "add", ".")
    git(wide, "commit", "-q", "-m", "first")
    c64 = git(wide, "rev-parse", "HEAD")
    log = _git_logged(tmp_path, monkeypatch)
    cases = [(repo, "ref: refs/heads/café\n", {"branch": "café", "commit": c}),
             (repo, c + "\n", {"branch": None, "commit": c}),
             (wide, c64 + "\n", {"branch": None, "commit": c64})]
    for where, text, head in cases:
        (where / ".git" / "HEAD").write_bytes(text.encode("utf-8"))
        log.write_text("")
        assert probe_git(where, {}, 10)["records"]["head"] == {"HEAD": head}
        started = [line.split(" -c ")[-1].split()[2] for line in log.read_text().splitlines()]
        assert sorted(started) == ["diff", "for-each-ref", "log", "ls-files"], (text, started)


def _alive_in(folder: Path) -> list[int]:
    """The pids of live processes (not zombies) whose working folder is `folder`."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
            if state != "Z" and os.readlink(f"/proc/{entry}/cwd") == str(folder):
                pids.append(int(entry))
        except OSError:
            continue
    return pids


def test_a_git_that_overruns_the_probe_is_killed_and_its_pipes_closed(tmp_path: Path) -> None:
    """A git blocked on a FIFO a server left as the index was left running after the probe failed (holding the
    resource), and the pipes of the git processes the probe stopped reading were left to the garbage collector."""
    repo = new_repo(tmp_path / "repo")
    (repo / "a.txt").write_text("one\n")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "first")
    (repo / ".git" / "index").unlink()
    os.mkfifo(repo / ".git" / "index")
    gc.collect()  # what earlier tests left to the collector is not this probe's
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        said = str(failure(probe_git, repo, {}, 0.5))
        gc.collect()
    assert said == "git diff: did not finish within 0.5 s"
    assert [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)] == []
    deadline = time.monotonic() + 10  # SIGKILLed and waited for: only the kernel's teardown may still be under way
    while _alive_in(repo) and time.monotonic() < deadline:
        time.sleep(0.05)
    left = _alive_in(repo)
    for pid in left:  # what the probe left, so that it does not outlive the test
        os.kill(pid, 9)
    assert left == []


def test_a_fixture_command_that_hangs_is_stopped_at_the_command_timeout(tmp_path: Path, monkeypatch) -> None:
    """A fixture command that never ends held the episode (and its worker) for good."""
    monkeypatch.setattr(resource, "COMMAND_TIMEOUT_S", 0.3)
    res = Resource(world(fixture=Fixture(commands=(("sleep", "5"),))), tmp_path)
    err = failure(res.make)
    assert str(err) == "world 'w': fixture command 'sleep' failed: Command '['sleep', '5']' timed out after 0.3 seconds"
    assert err.field == "fixture.commands" and not res.root.exists()


def test_a_resources_failing_probe_names_its_world_and_a_probe_has_no_version_unless_given(tmp_path: Path) -> None:
    """A failing probe of an episode's resource said "world 'None'"; a probe command's `{version}` with no server
    version given is empty."""
    res = Resource(world(probe_spec=Probe(builtin="jsonl", path="s.jsonl")), tmp_path).make()
    try:
        (res.root / "s.jsonl").write_text("{broken\n")
        err = failure(res.probe)
        assert str(err) == "world 'w': probe failed: s.jsonl line 1 is not JSON" and err.field == "probe.jsonl"
    finally:
        res.remove()
    spec = Probe(command=("sh", "-c", 'printf \'{"records": {"r": {"k": {"v": "%s"}}}}\' "$0"', "<{version}>"))
    assert probe(spec, tmp_path, {}, "w") == {"records": {"r": {"k": {"v": "<>"}}}}
    assert probe(spec, tmp_path, {}, "w", None, "2.0") == {"records": {"r": {"k": {"v": "<2.0>"}}}}


def test_a_state_file_that_cannot_be_read_fails_the_probe_with_the_systems_words(tmp_path: Path,
                                                                                 monkeypatch) -> None:
    """A read error (a disk's EIO) of a one-file probe's state file was shown as None or as a Python repr."""
    (tmp_path / "s.jsonl").write_text('{"id": 1}\n')
    real = Path.read_bytes
    errors = iter([OSError(errno.EIO, "Input/output error"), OSError("no strerror here")])

    def read_bytes(self: Path) -> bytes:
        if self.name == "s.jsonl":
            raise next(errors)
        return real(self)

    monkeypatch.setattr(Path, "read_bytes", read_bytes)
    for said in ("s.jsonl: Input/output error", "s.jsonl: no strerror here"):
        err = failure(probe, Probe(builtin="jsonl", path="s.jsonl"), tmp_path, {}, "w")
        assert str(err) == f"world 'w': probe failed: {said}" and err.field == "probe.jsonl"


def test_the_sqlite_probe_reads_a_table_without_rowid_however_its_sql_is_cased(tmp_path: Path) -> None:
    """A table declared `without rowid` in lower case failed the probe ("no such column: rowid")."""
    con = sqlite3.connect(tmp_path / "app.db")
    con.execute("create table kv (k text primary key, v) without rowid")
    con.execute("insert into kv values ('a', 1)")
    con.commit()
    con.close()
    row = {"k": "a", "v": 1}
    assert probe(Probe(builtin="sqlite", path="app.db"), tmp_path, {}, "w")["records"]["kv"] == {
        canonical_json(row): row}
