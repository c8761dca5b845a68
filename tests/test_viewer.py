"""`aft-bench view`: the API's numbers equal results.parquet and DIR/analysis for every run of the smoke matrix,
the runs query equals the same query in pandas, DIR is never written, and bad input is one line with the
project's exit codes. The browser tests are in test_viewer_browser.py."""

from __future__ import annotations

import hashlib
import importlib
import json
import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from starlette.testclient import TestClient

from aft_bench.cli.view import add_parsers
from aft_bench.viewer.model import Viewer
from aft_bench.viewer.runs import SHOWN
from aft_bench.viewer.server import build_app

from conftest import ROOT

cli_main = importlib.import_module("aft_bench.cli.main")


def tree_hash(folder: Path) -> str:
    """Every file's path, mode and bytes under `folder` (what `view` must leave unchanged)."""
    h = hashlib.sha256()
    for p in sorted(folder.rglob("*")):
        h.update(str(p.relative_to(folder)).encode() + b"\0" + oct(p.stat().st_mode).encode())
        if p.is_file():
            h.update(p.read_bytes())
    return h.hexdigest()


def copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns(".runner.lock"))
    return dst


def plain(v: object) -> object:
    if v is None or v is pd.NA or (isinstance(v, float) and math.isnan(v)):
        return None
    return v.item() if hasattr(v, "item") else v


def run_cli(argv: list[str], monkeypatch: pytest.MonkeyPatch) -> int:
    """`aft-bench` with the `view` command registered (main.py wires it in; until then, here)."""
    build = cli_main.build_parser

    def with_view():  # noqa: ANN202
        p = build()
        sub = next(a for a in p._actions if a.__class__.__name__ == "_SubParsersAction")
        if "view" not in sub.choices:
            add_parsers(sub)
        return p

    monkeypatch.setattr(cli_main, "build_parser", with_view)
    return cli_main.main(argv)


@pytest.fixture(scope="module")
def client(smoke_results: Path) -> TestClient:
    return TestClient(build_app(Viewer(smoke_results)))


def test_every_number_of_every_run_equals_results_parquet(smoke_results: Path, client: TestClient) -> None:
    df = pd.read_parquet(smoke_results / "results.parquet")
    assert len(df) == 36
    page = client.get("/api/runs", params={"size": 500}).json()
    assert page["total"] == len(df) and [r["run_id"] for r in page["rows"]] == df["run_id"].tolist()
    for rec, shown in zip(df.to_dict("records"), page["rows"]):
        expect = {k: plain(v) for k, v in rec.items()}
        assert shown == {c: expect[c] for c in SHOWN}
        run = client.get(f"/api/run/{rec['run_id']}").json()
        assert run["row"] == expect, rec["run_id"]
        assert run["verification"]["ok"] and run["verification"]["head"] == rec["trace_head"]
        labels = {lb["label"]: lb for lb in run["labels"]}
        for name, lb in labels.items():
            assert lb["value"] == expect[name], (rec["run_id"], name)
            assert lb["agrees"] is not False, (rec["run_id"], name, lb)  # trace-derived counts equal the row
        fired = [e for e in run["events"] if e["kind"] == "fault_fired"]
        assert bool(fired) == bool(expect["fault_fired"]), rec["run_id"]
        assert all(f["fired"] is not None for f in run["faults"]) == (expect["fault_fired"] is not False)


def test_every_pair_and_comparison_equals_the_analysis(smoke_results: Path, client: TestClient) -> None:
    pairs = pd.read_parquet(smoke_results / "analysis" / "pairs.parquet")
    df = pd.read_parquet(smoke_results / "results.parquet").set_index("run_id")
    listed = client.get("/api/pairs").json()
    assert listed["source"] == "analysis/pairs.parquet" and len(listed["pairs"]) == len(pairs)
    for rec in pairs.to_dict("records"):
        got = client.get(f"/api/pair/{rec['comparison']}/{rec['run_id_treatment']}").json()
        p = got["pair"]
        assert (p["run_id_control"], p["utility_diff"], p["cluster"], p["treatment"], p["control"]) == \
            (rec["run_id_control"], rec["utility_diff"], rec["task_id"], rec["treatment"], rec["control"])
        t, c = df.loc[rec["run_id_treatment"]], df.loc[rec["run_id_control"]]
        for lb in got["labels"]:
            assert (lb["treatment"], lb["control"]) == (plain(t[lb["label"]]), plain(c[lb["label"]]))
            assert lb["differs"] == (plain(t[lb["label"]]) != plain(c[lb["label"]]))
        assert all(i is not None or j is not None for i, j in got["alignment"])
    exp = client.get("/api/experiment").json()
    for name in ("primary", "secondary"):
        assert exp["analysis"][name] == json.loads((smoke_results / "analysis" / f"{name}.json").read_text())
    assert exp["pending_count"] == 0 and exp["runs"] == 36 and exp["analysis_stale"] is False


@pytest.mark.parametrize("params", [
    {"workload": "response_loss"}, {"outcome": "unsafely_committed", "sort": "run_id", "desc": "1"},
    {"fault_fired": "null", "sort": "context_tokens"}, {"recovered": "false"}, {"sort": "recovered", "size": "7", "page": "1"},
    {"condition": "I5", "duplicate_effects": "0", "sort": "wall_s", "desc": "1", "size": "5"},
])
def test_runs_query_equals_the_same_query_in_pandas(smoke_results: Path, client: TestClient, params: dict) -> None:
    df = pd.read_parquet(smoke_results / "results.parquet")
    for col in ("workload", "outcome", "condition"):
        if col in params:
            df = df[df[col] == params[col]]
    if "duplicate_effects" in params:
        df = df[df["duplicate_effects"] == int(params["duplicate_effects"])]
    if params.get("fault_fired") == "null":
        df = df[df["fault_fired"].isna()]
    if params.get("recovered") == "false":
        df = df[df["recovered"].map(lambda v: v is False or v is pd.NA or v == False) & df["recovered"].notna()]  # noqa: E712
    if "sort" in params:
        df = df.sort_values(params["sort"], ascending=params.get("desc") != "1", kind="stable", na_position="last")
    size, page = int(params.get("size", 50)), int(params.get("page", 0))
    got = client.get("/api/runs", params=params).json()
    assert got["total"] == len(df)
    assert [r["run_id"] for r in got["rows"]] == df["run_id"].tolist()[page * size:(page + 1) * size]


def test_a_page_never_ships_more_than_500_rows(client: TestClient) -> None:
    assert client.get("/api/runs", params={"size": 100000}).json()["size"] == 500
    assert client.get("/api/runs", params={"nosuch": "x"}).status_code == 400
    assert client.get("/api/run/nosuch").status_code == 404


def test_view_writes_nothing_into_the_directory(smoke_results: Path, tmp_path: Path, monkeypatch) -> None:
    d = copy(smoke_results, tmp_path / "r")
    before = tree_hash(d)
    c = TestClient(build_app(Viewer(d)))
    for url in ["/", "/api/status", "/api/experiment", "/api/facets", "/api/runs?sort=outcome", "/api/pairs",
                "/static/app.js"]:
        assert c.get(url).status_code == 200, url
    for rid in pd.read_parquet(d / "results.parquet")["run_id"]:
        assert c.get(f"/api/run/{rid}").status_code == 200
    assert run_cli(["view", str(d), "--bundle", str(tmp_path / "site")], monkeypatch) == 0
    assert tree_hash(d) == before
    assert (tmp_path / "site" / "index.html").is_file() and not list(d.rglob("*.viewer*"))


def test_bundle_holds_every_run_and_pair(smoke_results: Path, tmp_path: Path, monkeypatch, capsys) -> None:
    assert run_cli(["view", str(smoke_results), "--bundle", str(tmp_path / "site")], monkeypatch) == 0
    # the pairs of the config's eight comparisons (4 + 4 + 2 + 2 + 2 + 2 + 4 + 2), none of comparisons it did not name
    assert "36 runs, 22 pairs" in capsys.readouterr().out
    html = (tmp_path / "site" / "index.html").read_text()
    assert 'type="module" src=' not in html and "window.AFT_BUNDLE" in html  # file:// refuses module files
    assert len(list((tmp_path / "site" / "data").glob("run_*.js"))) == 36
    assert len(list((tmp_path / "site" / "data").glob("pair_*.js"))) == 22


def _bundled(site: Path, key: str) -> object:
    """The value a bundle's data file hands the page (`window.__aft(key, value);`)."""
    from aft_bench.viewer.bundle import file_key

    text = (site / "data" / f"{file_key(key)}.js").read_text()
    head = f"window.__aft({json.dumps(key)}, "
    assert text.startswith(head) and text.endswith(");\n")
    return json.loads(text[len(head):-3])


def test_every_bundled_run_and_pair_equals_what_the_server_answers(smoke_results: Path, client: TestClient,
                                                                    tmp_path: Path) -> None:
    """The bundle writes pages in one pass over the runs (pairs from what it kept of them): the same data."""
    from aft_bench.viewer.bundle import write_bundle

    write_bundle(Viewer(smoke_results), tmp_path / "site")
    for rid in pd.read_parquet(smoke_results / "results.parquet")["run_id"]:
        assert _bundled(tmp_path / "site", f"run/{rid}") == client.get(f"/api/run/{rid}").json(), rid
    pairs = client.get("/api/pairs").json()["pairs"]
    assert pairs
    for p in pairs:
        key = f"pair/{p['comparison']}/{p['run_id_treatment']}"
        assert _bundled(tmp_path / "site", key) == client.get(f"/api/{key}").json(), key


def _bundle_process(results: Path, out: Path, kill_at: str | None = None) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("AFT_BENCH_KILL_AT", None)
    if kill_at:
        env["AFT_BENCH_KILL_AT"] = kill_at
    return subprocess.Popen([sys.executable, "-m", "aft_bench.cli", "view", str(results), "--bundle", str(out)],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.parametrize("sig", ["TERM", "INT"])
def test_a_bundle_interrupted_halfway_leaves_the_parent_folder_as_it_was(smoke_results: Path, tmp_path: Path,
                                                                         sig: str) -> None:
    """SIGTERM (`timeout`) or Ctrl-C after 33 of the 66 run and pair pages: no OUT, no temporary folder beside it."""
    parent = tmp_path / "parent"
    parent.mkdir()
    (parent / "kept.txt").write_text("was here before")
    before = tree_hash(parent)
    proc = _bundle_process(smoke_results, parent / "site", kill_at=f"bundle_item:33:{sig}")
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "interrupted" in err and str(parent / "site") in err and "Traceback" not in err
    assert sorted(p.name for p in parent.iterdir()) == ["kept.txt"] and tree_hash(parent) == before


@pytest.mark.parametrize("sig", ["TERM", "INT"])
def test_a_signal_the_moment_the_temporary_folder_exists_leaves_nothing(smoke_results: Path, tmp_path: Path,
                                                                         sig: str) -> None:
    """The window a loaded machine found: the signal right after the temporary folder was made (it was made before
    the cleanup was armed, and a .site-* folder stayed)."""
    parent = tmp_path / "parent"
    parent.mkdir()
    proc = _bundle_process(smoke_results, parent / "site", kill_at=f"folder_made:1:{sig}")
    proc.communicate(timeout=120)
    assert proc.returncode in (130, -signal.SIGTERM, -signal.SIGINT) and list(parent.iterdir()) == []


def test_a_bundle_terminated_at_any_moment_leaves_either_nothing_or_the_whole_site(smoke_results: Path,
                                                                                   tmp_path: Path) -> None:
    """An outside SIGTERM as soon as the temporary folder appears: whenever it lands, the parent holds what it
    held before, or that and the complete site (if the bundle finished first); never a part of one."""
    parent = tmp_path / "parent"
    parent.mkdir()
    proc = _bundle_process(smoke_results, parent / "site")
    while proc.poll() is None and not list(parent.iterdir()):
        time.sleep(0.005)
    proc.terminate()
    proc.communicate(timeout=120)
    names = sorted(p.name for p in parent.iterdir())
    assert proc.returncode in (0, 130, -signal.SIGTERM) and names in ([], ["site"]), (proc.returncode, names)
    if names:  # finished before the signal landed: the whole site
        assert len(list((parent / "site" / "data").glob("run_*.js"))) == 36
        assert len(list((parent / "site" / "data").glob("pair_*.js"))) == 22


def _one_line_error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "Traceback" not in err, err
    return err


def test_bad_input_is_one_line_with_the_error_contract(smoke_results: Path, tmp_path: Path, monkeypatch, capsys) -> None:
    (tmp_path / "empty").mkdir()
    assert run_cli(["view", str(tmp_path / "empty")], monkeypatch) == 2
    assert "not a results directory" in _one_line_error(capsys)
    assert run_cli(["view", str(tmp_path / "nosuch")], monkeypatch) == 2
    assert "no such results folder" in _one_line_error(capsys)
    (tmp_path / "taken").mkdir()
    assert run_cli(["view", str(smoke_results), "--bundle", str(tmp_path / "taken")], monkeypatch) == 2
    assert "already exists" in _one_line_error(capsys)
    assert run_cli(["view", str(smoke_results), "--port", "70000"], monkeypatch) == 2
    assert "--port" in _one_line_error(capsys)
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen(1)
    try:
        assert run_cli(["view", str(smoke_results), "--port", str(busy.getsockname()[1])], monkeypatch) == 1
        assert "cannot listen" in _one_line_error(capsys)
    finally:
        busy.close()
    d = copy(smoke_results, tmp_path / "damaged")
    (d / "results.parquet").unlink()
    lines = (d / "journal.jsonl").read_text().splitlines(keepends=True)
    lines[3] = lines[3].replace('"outcome":"completed"', '"outcome":"nonsense"', 1)
    (d / "journal.jsonl").write_text("".join(lines))
    assert run_cli(["view", str(d), "--bundle", str(tmp_path / "s1")], monkeypatch) == 2
    assert "journal line is corrupt" in _one_line_error(capsys) and not (tmp_path / "s1").exists()


def test_partial_directories_open_and_say_what_is_missing(smoke_results: Path, tmp_path: Path) -> None:
    d = copy(smoke_results, tmp_path / "partial")
    (d / "results.parquet").unlink()
    shutil.rmtree(d / "analysis")
    journal = (d / "journal.jsonl").read_bytes()
    (d / "journal.jsonl").write_bytes(journal[: len(journal) - 200])  # torn last line
    ids = pd.read_parquet(smoke_results / "results.parquet")["run_id"].tolist()
    (d / "traces" / f"{ids[0]}.jsonl").unlink()
    tampered = d / "traces" / f"{ids[1]}.jsonl"
    tampered.write_text(tampered.read_text().replace('"tool_call"', '"tool_cal1"', 1))
    with (d / "failures.jsonl").open("a") as fh:
        fh.write(json.dumps({"run_id": ids[-1], "session": 1, "error": "RuntimeError", "message": "backend down"}) + "\n")
    v = Viewer(d)
    notes = " ".join(v.status()["notes"])
    assert "results.parquet is missing" in notes and "analysis/ is missing" in notes and "torn" in notes
    assert "have no trace file" in notes
    exp = v.experiment()
    assert len(v.runs) == 35 and exp["pending_count"] == 1
    assert exp["pending"][0]["run_id"] == ids[-1] and exp["pending"][0]["message"] == "backend down"
    missing, bad = v.run(ids[0]), v.run(ids[1])
    assert not missing["verification"]["ok"] and "missing" in missing["verification"]["error"]
    assert not bad["verification"]["ok"] and bad["verification"]["error"] and bad["events"]  # shown, marked failed
    assert v.run(ids[2])["verification"]["ok"]
    assert v.pair_list()["source"].startswith("matched here")


def test_the_index_is_rebuilt_when_results_change(smoke_results: Path, tmp_path: Path) -> None:
    d = copy(smoke_results, tmp_path / "r")
    v = Viewer(d)
    key = v.status()["key"]
    assert not v.refresh()
    df = pd.read_parquet(d / "results.parquet")
    df.iloc[:30].to_parquet(d / "results.parquet", index=False)
    assert v.refresh() and len(v.runs) == 30 and v.status()["key"] != key
    assert v.experiment()["analysis_stale"] is True
