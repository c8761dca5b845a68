"""`aft-bench atlas` as a user runs it, offline: a real registry on 127.0.0.1 (tests/atlas_index.py) serving real
wheels of a small notes server whose releases behave differently, real pip installs into the atlas's cache, real
server processes, the real CLI. Each test asserts the exact classes, reasons, files and exit codes a user reads."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from atlas_index import Registry  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
AFT = [sys.executable, "-m", "aft_bench.cli"]
NOTES = """[atlas]
id = "notes-test"

[[servers]]
name = "notes"
registry = "pypi"
package = "atlas-notes-mcp"
since = "1.0"
command = ["{install}/bin/notes-mcp", "{root}/notes.jsonl"]
probe = { builtin = "jsonl", path = "notes.jsonl" }

[servers.examples]
add_note = [{ args = { text = "buy milk" } }]
clear_notes = [{ before = [{ tool = "add_note", args = { text = "call the bank" } }] }]

[servers.claims]
add_note = { idempotent = true, source = "its README: adding the same note twice keeps one" }
clear_notes = { idempotent = false, source = "its README: clearing twice is an error" }
"""


@pytest.fixture(scope="module")
def registry() -> Iterator[Registry]:
    r = Registry()
    yield r
    r.stop()


def atlas(registry: Registry, cwd: Path, *args: str, env: dict[str, str] | None = None, cache: Path | None = None,
          timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """`aft-bench atlas` run from `cwd` (its atlas file `a.toml`), pip and the atlas pointed at the registry."""
    e = {k: v for k, v in os.environ.items() if k != "AFT_BENCH_KILL_AT"}
    e.update(registry.env(), **(env or {}))
    return subprocess.run([*AFT, "atlas", "a.toml", "--out", "out", "--cache", str(cache or cwd / "cache"), *args],
                          cwd=cwd, env=e, capture_output=True, text=True, timeout=timeout)


def folder(tmp: Path, text: str = NOTES) -> Path:
    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / "a.toml").write_text(text, encoding="utf-8")
    return tmp


@pytest.fixture(scope="module")
def measured(registry: Registry, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One whole atlas of the four releases, measured once for the tests that read it."""
    cwd = folder(tmp_path_factory.mktemp("atlas-whole"))
    done = atlas(registry, cwd)
    assert done.returncode == 0, done.stderr
    return cwd


def _rows(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "dataset.jsonl").read_text(encoding="utf-8").splitlines()]


def test_each_release_is_installed_measured_and_what_could_not_be_is_untestable_with_its_reason(measured: Path) -> None:
    out = measured / "out"
    bare = {(r["release"], r["tool"]): (r["class"], r["signal"]) for r in _rows(out) if r["treatment"] == "bare"}
    assert bare == {
        ("1.0", "add_note"): ("duplicate", "state: the re-issue changed it again"),
        ("1.0", "clear_notes"): ("silent_success", "state: the call changed it; answer: success"),
        ("2.0", "add_note"): ("false_failure", 'state: the call changed it; answer: text "error"'),
        ("2.0", "clear_notes"): ("silent_success", "state: the call changed it; answer: success"),
    }
    untestable = {(r["release"], r["tool"]): r["reason"] for r in _rows(out) if r["status"] == "untestable"}
    assert untestable[("1.0", "tag_note")] == "it needs arguments and the atlas entry gives no example call"
    assert untestable[("2.0", "tag_note")] == "it needs arguments and the atlas entry gives no example call"
    assert untestable[("3.0", None)] == ("start: the server exited (status 3) before it answered initialize; its last "
                                          "words: notes: cannot open the store")
    assert untestable[("4.0", None)].startswith("install: pip install atlas-notes-mcp==4.0 exited 1: ")
    assert "atlas-no-such-library" in untestable[("4.0", None)]
    assert len(untestable) == 4
    # three treatments for each measured example, nothing else
    assert sorted((r["release"], r["tool"], r["treatment"]) for r in _rows(out) if r["status"] == "measured") == \
        sorted((rel, tool, t) for rel in ("1.0", "2.0") for tool in ("add_note", "clear_notes")
               for t in ("bare", "key", "verify"))
    # 2.0's helper library came out in 1.0 and 2.0; 2.0 of it after the notes release: the install took 1.0
    helper = next((measured / "cache" / "pypi" / "atlas-notes-mcp-2.0").glob("lib/python*/site-packages/notes_helper"))
    assert (helper / "__init__.py").read_text() == 'VERSION = "1.0"\n'
    lock = json.loads((measured / "a.lock.json").read_text())
    assert lock["servers"]["notes"]["releases"] == ["1.0", "2.0", "3.0", "4.0"]
    assert lock["servers"]["notes"]["published"]["2.0"] == "2025-06-01T10:00:00Z"
    cell = json.loads((out / "cells" / "notes" / "2.0.json").read_text())
    assert cell["as_of"] == "2025-06-02T10:00:00Z"


def test_drift_findings_badge_and_evidence_are_the_measured_ones(measured: Path) -> None:
    out = measured / "out"
    assert json.loads((out / "drift.json").read_text()) == [
        {"server": "notes", "tool": "add_note", "from": "1.0", "to": "2.0", "what": "class", "old": "duplicate",
         "new": "false_failure"},
        {"server": "notes", "tool": "add_note", "from": "1.0", "to": "2.0", "what": "idempotentHint",
         "old": "contradicted", "new": "true"}]
    doc = json.loads((out / "index.json").read_text())
    assert doc["findings"] == {
        "servers": 1, "measured_servers": 1, "cells": 4, "measured_cells": 2, "writing_tools": 2,
        "classes": {"duplicate": 0, "false_failure": 1, "silent_success": 1, "safe": 0}, "untestable_tools": 1,
        "hints": {"readOnlyHint": {"contradicted": 0, "undeclared": 1, "true": 1},
                  "idempotentHint": {"contradicted": 0, "undeclared": 1, "true": 1}},
        # the docs' claims against the newest release: add_note keeps one (a false failure, but no second note);
        # clearing again is no error there (a silent success): that claim is contradicted
        "claims": [
            {"server": "notes", "release": "2.0", "tool": "add_note", "idempotent": True,
             "source": "its README: adding the same note twice keeps one", "truth": "consistent",
             "class": "false_failure"},
            {"server": "notes", "release": "2.0", "tool": "clear_notes", "idempotent": False,
             "source": "its README: clearing twice is an error", "truth": "contradicted", "class": "silent_success"}]}
    one = json.loads((out / "cells" / "notes" / "1.0.json").read_text())
    from aft_bench.atlas.dataset import verdicts

    assert verdicts(one)["add_note"]["claim"]["truth"] == "contradicted"  # 1.0 duplicated: the claim did not hold
    assert json.loads((out / "badges" / "notes.json").read_text()) == {
        "schemaVersion": 1, "label": "lost-answer re-issue", "message": "2.0: 1 false failure, 1 silent success",
        "color": "orange"}
    ev = json.loads((out / "evidence" / "notes.json").read_text())
    assert ev["release"] == "2.0" and ev["untestable"] == {
        "tag_note": "it needs arguments and the atlas entry gives no example call"}
    add = next(t for t in ev["tools"] if t["tool"] == "add_note")
    assert add["hints"] == [{"hint": "readOnlyHint", "declared": False, "truth": "consistent"},
                            {"hint": "idempotentHint", "declared": True, "truth": "consistent"}]
    assert add["effect"] == {"lines": {"added": ["1"], "changed": [], "removed": []}}  # the witness: a line added
    assert add["reissue_changes"] == {}  # and the re-issue added none
    clear = next(t for t in ev["tools"] if t["tool"] == "clear_notes")
    assert [h["truth"] for h in clear["hints"]] == ["undeclared", "undeclared"]
    assert clear["effect"] == {"lines": {"added": [], "changed": [], "removed": ["1"]}}
    assert clear["reissue_changes"] == {}
    summary = (out / "summary.md").read_text()
    assert "Of **2 writing tools on 1 servers**" in summary
    assert "| 0 | 1 | 1 | 0 | 1 |" in summary
    assert "- notes add\\_note 1.0 → 2.0: class duplicate → false_failure" in summary
    assert ("| notes | 2.0 | clear\\_notes | not idempotent | silent_success | contradicted | its README: clearing "
            "twice is an error |") in summary
    assert add["claim"] == {"idempotent": True, "source": "its README: adding the same note twice keeps one",
                            "truth": "consistent"}


def test_a_rerun_asks_no_registry_and_measures_nothing_twice(registry: Registry, measured: Path) -> None:
    before = {p: p.read_bytes() for p in (measured / "out" / "cells").rglob("*.json")}
    asked = len(registry.hits)
    done = atlas(registry, measured)
    assert done.returncode == 0, done.stderr
    assert "atlas notes-test: 4 server-releases, 4 already recorded, 0 to measure" in done.stderr
    assert len(registry.hits) == asked  # the lock and the cache answer everything
    assert {p: p.read_bytes() for p in (measured / "out" / "cells").rglob("*.json")} == before


def test_an_entry_changed_is_measured_again_and_only_its_own_cells(registry: Registry, measured: Path,
                                                                   tmp_path: Path) -> None:
    import shutil

    cwd = tmp_path / "changed"
    shutil.copytree(measured, cwd, ignore=shutil.ignore_patterns("cache"))
    two = NOTES + '\n[[servers]]\nname = "notes-again"\nregistry = "pypi"\npackage = "atlas-notes-mcp"\n' \
        'releases = ["2.0"]\ncommand = ["{install}/bin/notes-mcp", "{root}/n.jsonl"]\n' \
        'probe = { builtin = "jsonl", path = "n.jsonl" }\n[servers.examples]\nadd_note = [{ args = { text = "x" } }]\n'
    (cwd / "a.toml").write_text(two.replace('text = "buy milk"', 'text = "buy bread"'))
    done = atlas(registry, cwd, cache=measured / "cache")
    assert done.returncode == 0, done.stderr
    # the notes entry changed (its example): its four cells again; the new server's one cell; nothing else
    assert "5 server-releases, 0 already recorded, 5 to measure" in done.stderr
    rows = _rows(cwd / "out")
    assert {(r["server"], r["release"], r["tool"], r["class"]) for r in rows if r["treatment"] == "bare"} == {
        ("notes", "1.0", "add_note", "duplicate"), ("notes", "1.0", "clear_notes", "silent_success"),
        ("notes", "2.0", "add_note", "false_failure"), ("notes", "2.0", "clear_notes", "silent_success"),
        ("notes-again", "2.0", "add_note", "false_failure")}


def test_kill_9_mid_atlas_then_the_rerun_gives_the_uninterrupted_dataset(registry: Registry, measured: Path,
                                                                         tmp_path: Path) -> None:
    cwd = folder(tmp_path / "killed")
    killed = atlas(registry, cwd, "--workers", "2", env={"AFT_BENCH_KILL_AT": "atlas_cell:2"},
                   cache=measured / "cache")
    assert killed.returncode == -signal.SIGKILL
    recorded = sorted(p.name for p in (cwd / "out" / "cells" / "notes").glob("*.json"))
    assert len(recorded) == 2 and not (cwd / "out" / "dataset.jsonl").exists()
    done = atlas(registry, cwd, cache=measured / "cache")
    assert done.returncode == 0, done.stderr
    assert "4 server-releases, 2 already recorded, 2 to measure" in done.stderr
    for name in ("dataset.jsonl", "drift.json", "index.json", "atlas.sarif", "badges/notes.json",
                 "evidence/notes.json", "summary.md", "site/index.html", "cards/notes/1.0.json", "cards/notes/2.0.json"):
        assert (cwd / "out" / name).read_bytes() == (measured / "out" / name).read_bytes(), name


def test_dask_gives_the_dataset_a_local_run_gives(registry: Registry, measured: Path, tmp_path: Path) -> None:
    pytest.importorskip("distributed", reason="the dask extra is not installed (pip install -e .[dask])")
    cwd = folder(tmp_path / "dask")
    done = atlas(registry, cwd, "--executor", "dask", "--scheduler", "local:2", cache=measured / "cache")
    assert done.returncode == 0, done.stderr
    for name in ("dataset.jsonl", "drift.json", "index.json", "atlas.sarif", "summary.md", "site/index.html"):
        assert (cwd / "out" / name).read_bytes() == (measured / "out" / name).read_bytes(), name


def _sarif_schema() -> dict:
    schema = ROOT / ".worlds" / "test-node" / "sarif" / "sarif-2.1.0-rtm.5.json"
    servers = os.environ.get("AFT_BENCH_SERVERS")
    if servers:
        schema = Path(servers) / "test-node" / "sarif" / "sarif-2.1.0-rtm.5.json"
    if not schema.exists():
        pytest.skip(f"no SARIF schema at {schema}: make test-servers fetches it")
    return json.loads(schema.read_text(encoding="utf-8"))


def test_the_sarif_validates_against_the_sarif_2_1_0_schema_and_names_each_finding(measured: Path) -> None:
    import jsonschema

    schema = _sarif_schema()
    log = json.loads((measured / "out" / "atlas.sarif").read_text())
    jsonschema.Draft4Validator(schema).validate(log)
    found = [(r["ruleId"], r["locations"][0]["logicalLocations"][0]["fullyQualifiedName"]) for r in
             log["runs"][0]["results"]]
    assert found == [("duplicate", "atlas-notes-mcp@1.0/add_note"), ("annotation", "atlas-notes-mcp@1.0/add_note"),
                     ("false_failure", "atlas-notes-mcp@2.0/add_note")]
    dup = log["runs"][0]["results"][0]
    assert dup["level"] == "error"
    assert dup["message"]["text"] == ('add_note (atlas-notes-mcp 1.0): its re-issue after a lost answer is a '
                                      'duplicate. Evidence: args {"text": "buy milk"}; state: the re-issue changed '
                                      'it again')
    # known negative: the same log with a level SARIF does not have is refused by the schema
    bad = json.loads(json.dumps(log))
    bad["runs"][0]["results"][0]["level"] = "fatal"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft4Validator(schema).validate(bad)


def test_sarif_reports_the_classes_the_user_names(registry: Registry, measured: Path, tmp_path: Path) -> None:
    import shutil

    cwd = tmp_path / "sarif"
    shutil.copytree(measured, cwd, ignore=shutil.ignore_patterns("cache"))
    done = atlas(registry, cwd, "--sarif", "silent-success", cache=measured / "cache")
    assert done.returncode == 0, done.stderr
    log = json.loads((cwd / "out" / "atlas.sarif").read_text())
    assert [(r["ruleId"], r["properties"]["release"], r["locations"][0]["logicalLocations"][0]["name"])
            for r in log["runs"][0]["results"]] == [("silent_success", "1.0", "clear_notes"),
                                                    ("silent_success", "2.0", "clear_notes")]
    bad = atlas(registry, cwd, "--sarif", "duplicates", cache=measured / "cache")
    assert bad.returncode == 2 and "unknown class" in bad.stderr and "'duplicates'" in bad.stderr


@pytest.mark.parametrize("text, field, said", [
    (NOTES.replace('since = "1.0"', 'since = "1.0"\nreleases = ["1.0"]'), "releases",
     "name the releases, or `since` one (not both)"),
    (NOTES.replace('"{install}/bin/notes-mcp"', '"notes-mcp"'), "command", "name its folder as {install}"),
    (NOTES.replace('registry = "pypi"', 'registry = "cran"'), "registry", "pypi"),
    (NOTES.replace('since = "1.0"', 'since = "1.0"\npins = ["--index-url=http://evil"]'), "pins.0",
     "never an option"),
    (NOTES.replace("[atlas]\n", ""), "atlas", "an atlas file begins with an [atlas] table"),
    (NOTES + "\n[[servers]]" + NOTES.split("[[servers]]")[1], "servers.1.name", "two servers have this name"),
])
def test_a_bad_atlas_file_is_one_line_naming_its_field_and_writes_nothing(registry: Registry, tmp_path: Path,
                                                                          text: str, field: str, said: str) -> None:
    cwd = folder(tmp_path / "bad", text)
    done = atlas(registry, cwd)
    assert done.returncode == 2, done.stderr
    assert field in done.stderr and said in done.stderr and "a.toml" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert not (cwd / "out").exists() and not (cwd / "a.lock.json").exists()


def test_a_release_the_registry_does_not_have_is_bad_input_naming_it(registry: Registry, tmp_path: Path) -> None:
    cwd = folder(tmp_path / "nosuch", NOTES.replace('since = "1.0"', 'releases = ["1.0", "9.9"]'))
    done = atlas(registry, cwd)
    assert done.returncode == 2
    assert "releases" in done.stderr and "no stable release 9.9" in done.stderr
    assert not (cwd / "out").exists()


def test_offline_without_a_lock_is_bad_input_and_asks_no_registry(registry: Registry, tmp_path: Path) -> None:
    cwd = folder(tmp_path / "offline")
    asked = len(registry.hits)
    done = atlas(registry, cwd, "--offline")
    assert done.returncode == 2 and "not in the atlas lock" in done.stderr
    assert len(registry.hits) == asked


CHROMIUM = os.environ.get("AFT_BENCH_CHROMIUM", "/usr/bin/chromium")


def test_the_atlas_page_opens_from_disk_in_a_real_browser_lists_every_server_and_nothing_overlaps(
        measured: Path) -> None:
    if not Path(CHROMIUM).exists():
        pytest.skip(f"no Chromium at {CHROMIUM}: apt-get install -y chromium (CI installs it)")
    sync_api = pytest.importorskip("playwright.sync_api")
    from test_viewer_browser import OVERLAPS_JS

    page_file = measured / "out" / "site" / "index.html"
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            for width in (1280, 420):
                pg = b.new_page(viewport={"width": width, "height": 900})
                requested: list[str] = []
                pg.on("request", lambda r: requested.append(r.url))
                pg.goto(page_file.as_uri())
                assert [s.get_attribute("data-server") for s in pg.locator("[data-testid=atlas-server]").all()] == \
                    ["notes"]
                assert pg.locator("[data-testid=atlas-tool]").count() == 3  # add_note, clear_notes, tag_note
                assert "duplicate" in pg.locator("[data-server=notes]").inner_text()
                assert pg.locator("[data-testid=atlas-drift] li").count() == 2
                assert pg.evaluate(OVERLAPS_JS) == [], width
                assert requested == [page_file.as_uri()]  # nothing fetched: it opens from disk alone
                pg.close()
        finally:
            b.close()


def test_install_only_fills_the_cache_from_the_lock_and_measures_nothing(registry: Registry, measured: Path,
                                                                         tmp_path: Path) -> None:
    import shutil

    cwd = folder(tmp_path / "install")
    shutil.copy(measured / "a.lock.json", cwd / "a.lock.json")
    done = subprocess.run([*AFT, "atlas", "a.toml", "--install-only", "--offline", "--cache", str(cwd / "c")], cwd=cwd,
                          env={**os.environ, **registry.env()}, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == (f"atlas notes-test: 3 of 4 releases installed in {cwd / 'c'}; 1 could not be "
                                   "(their cells will be untestable)")
    assert sorted(p.name for p in (cwd / "c" / "pypi").iterdir() if p.is_dir()) == [
        "atlas-notes-mcp-1.0", "atlas-notes-mcp-2.0", "atlas-notes-mcp-3.0"]
    assert not (cwd / "out").exists()


def test_retry_untestable_measures_only_the_untestable_cells_again(registry: Registry, measured: Path,
                                                                   tmp_path: Path) -> None:
    import shutil

    cwd = tmp_path / "retry"
    shutil.copytree(measured, cwd, ignore=shutil.ignore_patterns("cache"))
    done = atlas(registry, cwd, "--retry-untestable", cache=measured / "cache")
    assert done.returncode == 0, done.stderr
    assert "4 server-releases, 2 already recorded, 2 to measure" in done.stderr
    assert sorted(ln.split(":")[0].split("] ")[1] for ln in done.stderr.splitlines() if ln.startswith("[")) == [
        "notes 3.0", "notes 4.0"]


def test_only_measures_the_servers_named_and_the_dataset_keeps_every_recorded_one(registry: Registry, measured: Path,
                                                                                  tmp_path: Path) -> None:
    import shutil

    cwd = tmp_path / "only"
    shutil.copytree(measured, cwd, ignore=shutil.ignore_patterns("cache"))
    (cwd / "a.toml").write_text(NOTES + '\n[[servers]]\nname = "again"\nregistry = "pypi"\npackage = "atlas-notes-mcp"\n'
                                'releases = ["1.0"]\ncommand = ["{install}/bin/notes-mcp", "{root}/n.jsonl"]\n'
                                'probe = { builtin = "jsonl", path = "n.jsonl" }\n[servers.examples]\n'
                                'add_note = [{ args = { text = "x" } }]\n')
    done = atlas(registry, cwd, "--only", "again", cache=measured / "cache")
    assert done.returncode == 0, done.stderr
    assert "atlas notes-test: 1 server-releases, 0 already recorded, 1 to measure" in done.stderr
    assert sorted({(r["server"], r["release"]) for r in _rows(cwd / "out")}) == [
        ("again", "1.0"), ("notes", "1.0"), ("notes", "2.0"), ("notes", "3.0"), ("notes", "4.0")]
    unknown = atlas(registry, cwd, "--only", "nosuch", cache=measured / "cache")
    assert unknown.returncode == 2 and "--only" in unknown.stderr and "the atlas has no such server" in unknown.stderr


def test_a_second_atlas_on_a_folder_being_written_is_refused(registry: Registry, measured: Path,
                                                             tmp_path: Path) -> None:
    import fcntl
    import shutil

    cwd = tmp_path / "busy"
    shutil.copytree(measured, cwd, ignore=shutil.ignore_patterns("cache"))
    before = (cwd / "out" / "dataset.jsonl").read_bytes()
    with open(cwd / "out" / ".atlas.lock", "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        done = atlas(registry, cwd, cache=measured / "cache")
    assert done.returncode == 2
    assert done.stderr.strip() == (f"aft-bench: error: {cwd / 'out'}: field '--out': another aft-bench atlas is "
                                   f"writing this folder (got '{cwd / 'out'}')")
    assert (cwd / "out" / "dataset.jsonl").read_bytes() == before


def test_a_world_whose_command_names_its_own_install_is_pinned_there_not_at_the_servers_layout(tmp_path: Path,
                                                                                             monkeypatch) -> None:
    """The atlas runs a world's overlay on a release from its cache folder; the pin is read from that install even
    where `{servers}` holds another version of the same package (it read the layout's before)."""
    from aft_bench.world.external import installed_version, load_external

    servers = tmp_path / "servers" / "node" / "node_modules" / "notes-pkg"
    mine = tmp_path / "cache" / "node_modules" / "notes-pkg"
    for where, version in ((servers, "2.0.0"), (mine, "1.0.0")):
        (where / "dist").mkdir(parents=True)
        (where / "package.json").write_text(json.dumps({"name": "notes-pkg", "version": version}))
        (where / "dist" / "index.js").write_text("")
    monkeypatch.setenv("AFT_BENCH_SERVERS", str(tmp_path / "servers"))
    w = tmp_path / "w"
    w.mkdir()
    (w / "world.toml").write_text(f'''kind = "mcp_stdio"
id = "notes"
[server]
package = "notes-pkg"
version = "1.0.0"
command = ["node", "{mine / 'dist' / 'index.js'}"]
[probe]
builtin = "folder"
[tools.add]
effect = "write"
''')
    assert installed_version(load_external(w)) == "1.0.0"
    # known positive: a command that starts the server from the layout reads the layout
    (w / "world.toml").write_text((w / "world.toml").read_text().replace(str(mine), "{servers}/node/node_modules/notes-pkg"))
    assert installed_version(load_external(w)) == "2.0.0"


def test_an_entry_may_name_a_world_folder_whose_overlay_and_examples_it_measures(registry: Registry, measured: Path,
                                                                                 tmp_path: Path) -> None:
    cwd = tmp_path / "world"
    (cwd / "notesworld").mkdir(parents=True)
    (cwd / "notesworld" / "world.toml").write_text('''kind = "mcp_stdio"
id = "notesworld"
[server]
package = "atlas-notes-mcp"
version = "0.0"
command = ["never-run"]
[probe]
builtin = "jsonl"
path = "notes.jsonl"
[tools.list_notes]
effect = "read"
[tools.add_note]
effect = "write"
examples = [{ args = { text = "from the world file" } }]
[tools.archive_note]
effect = "write"
''')
    (cwd / "a.toml").write_text('''[atlas]
id = "w"
[[servers]]
name = "notes"
registry = "pypi"
package = "atlas-notes-mcp"
releases = ["1.0"]
world = "notesworld"
command = ["{install}/bin/notes-mcp", "{root}/notes.jsonl"]
''')
    done = atlas(registry, cwd, cache=measured / "cache")
    assert done.returncode == 0, done.stderr
    rows = _rows(cwd / "out")
    assert {(r["tool"], r["class"], r["reason"]) for r in rows if r["treatment"] in ("bare", None)} == {
        ("add_note", "duplicate", ""),
        ("clear_notes", None, "the world file does not describe this tool"),
        ("tag_note", None, "the world file does not describe this tool")}
    # a tool the release does not list is named apart, not counted as an untestable tool of it
    cell = json.loads((cwd / "out" / "cells" / "notes" / "1.0.json").read_text())
    assert cell["absent"] == {"archive_note": "release 1.0 does not list this tool the world describes"}
    card = json.loads((cwd / "out" / "cards" / "notes" / "1.0.json").read_text())
    assert [t["args"] for t in card["tools"]] == [{"text": "from the world file"}]
    missing = atlas(registry, folder(tmp_path / "noworld", NOTES.replace('since = "1.0"', 'since = "1.0"\nworld = "nowhere"')))
    assert missing.returncode == 2 and "servers.0.world" in missing.stderr and "no world.toml in that folder" in missing.stderr


def test_a_lock_naming_a_release_outside_the_cache_is_refused_and_nothing_is_removed(registry: Registry,
                                                                                   tmp_path: Path) -> None:
    cwd = folder(tmp_path / "lock")
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep").write_text("mine")
    (cwd / "a.lock.json").write_text(json.dumps({"lock": 1, "servers": {"notes": {
        "registry": "pypi", "package": "atlas-notes-mcp", "since": "1.0", "last": None, "listed": [],
        "releases": ["1.0/../../../../victim"], "published": {}}}}))
    done = atlas(registry, cwd, "--offline")
    assert done.returncode == 2
    assert "a.lock.json" in done.stderr and "servers.notes" in done.stderr and "delete the entry" in done.stderr
    assert (victim / "keep").read_text() == "mine" and not (cwd / "out").exists()


def test_a_secret_whose_value_is_a_json_word_leaves_every_record_whole(registry: Registry, measured: Path,
                                                                       tmp_path: Path) -> None:
    """Redacting JSON as text turned `"realized": null` into `"realized": [redacted]` where a credential's value was
    `null`: every cell then failed to parse and the atlas published nothing. Records are redacted value by value."""
    cwd = folder(tmp_path / "secret")
    done = atlas(registry, cwd, env={"SERVICE_API_KEY": "null"}, cache=measured / "cache")
    assert done.returncode == 0, done.stderr
    assert "4 of 4 server-releases recorded (2 measured)" in done.stdout
    keep = ("server", "release", "tool", "example", "treatment", "status", "class")
    assert [{k: r[k] for k in keep} for r in _rows(cwd / "out")] == [{k: r[k] for k in keep} for r in
                                                                      _rows(measured / "out")]


def test_a_tool_with_a_hostile_name_that_kills_its_server_is_untestable_alone_and_inert_in_every_output(
        registry: Registry, measured: Path, tmp_path: Path) -> None:
    hostile = "x`\n\n## All safe ![](https://evil.example/p.png) <img src=x onerror=alert(1)> | y"
    text = NOTES.replace('since = "1.0"', 'releases = ["1.0"]\nenv = { NOTES_EXTRA_TOOL = '
                         + json.dumps(hostile) + " }")
    cwd = folder(tmp_path / "hostile", text)
    done = atlas(registry, cwd, cache=measured / "cache")
    assert done.returncode == 0, done.stderr
    cell = json.loads((cwd / "out" / "cells" / "notes" / "1.0.json").read_text())
    assert cell["status"] == "measured"
    assert cell["tools"][hostile]["status"] == "untestable"
    assert "exited" in cell["tools"][hostile]["reason"] or "closed" in cell["tools"][hostile]["reason"], cell["tools"]
    # the other tools were measured alone, and the card does not call them untested
    assert {t: s["status"] for t, s in cell["tools"].items() if t != hostile} == {
        "add_note": "measured", "clear_notes": "measured", "tag_note": "untestable"}
    assert cell["card"]["untested"] == ["tag_note"] or cell["card"]["untested"] == sorted(["tag_note"])
    summary = (cwd / "out" / "summary.md").read_text()
    assert not any(line.startswith("## All safe") for line in summary.splitlines())
    import re

    assert not re.search(r"(?<!\\)!\[", summary) and not re.search(r"(?<!\\)<img", summary)  # escaped: inert
    page = (cwd / "out" / "site" / "index.html").read_text()
    assert "<img" not in page and "&lt;img src=x onerror=alert(1)&gt;" in page


def test_the_shipped_atlas_loads_and_its_lock_names_every_release_offline() -> None:
    """`make atlas` installs from the lock with --offline: every entry must be in it, as the entry now reads."""
    from aft_bench.atlas.releases import lock_path
    from aft_bench.atlas.run import plan, resolve
    from aft_bench.atlas.spec import load_atlas

    path = ROOT / "atlases" / "mcp.toml"
    a = load_atlas(path)
    planned = plan(a, resolve(a, lock_path(path), offline=True, atlas_file=path))
    assert len({(e.registry, e.package) for e in a.servers}) >= 20
    assert len(planned) >= 60
    assert all(p.published for p in planned)  # each install takes its dependencies as of its publication


def test_the_fixture_prepares_the_folder_the_tools_are_listed_in(registry: Registry, measured: Path,
                                                                  tmp_path: Path) -> None:
    """A server that checks its folder at start (here: a command that fails unless the fixture's file is there)
    is listed in a folder its fixture prepared, not an empty one."""
    text = NOTES.replace('since = "1.0"', 'releases = ["1.0"]').replace(
        'command = ["{install}/bin/notes-mcp", "{root}/notes.jsonl"]',
        'command = ["sh", "-c", "test -f {root}/ready && exec {install}/bin/notes-mcp {root}/notes.jsonl"]\n'
        'fixture = { files = { ready = "yes" } }')
    cwd = folder(tmp_path / "fixture", text)
    done = atlas(registry, cwd, cache=measured / "cache")
    assert done.returncode == 0, done.stderr
    cell = json.loads((cwd / "out" / "cells" / "notes" / "1.0.json").read_text())
    assert cell["status"] == "measured", cell["reason"]
    assert cell["tools"]["add_note"]["status"] == "measured"
