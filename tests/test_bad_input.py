"""Every command against malformed input: generated broken data files, results tables, manifests, journals,
traces, lock files, expectation files and flags. Each case asserts the exit code (2 for bad input, 1 for a
failed check or damaged evidence), exactly one line on stderr, no traceback, and that nothing in the folder
was written or changed."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pytest

from aft_bench.cli.main import main

from conftest import ROOT, WORLDS

SMOKE = ROOT / "configs" / "smoke.toml"


def _snapshot(d: Path) -> dict[str, str]:
    out = {}
    for p in sorted(d.rglob("*")):
        if p.is_symlink():
            out[str(p.relative_to(d))] = "link:" + os.readlink(p)
        elif p.is_file():
            out[str(p.relative_to(d))] = hashlib.sha256(p.read_bytes()).hexdigest()
        elif p.is_dir():
            out[str(p.relative_to(d))] = "dir"
    return out


# --- ways to break a data file (TOML): each writes the broken file at `p` --------------------------------------
def _dir(p: Path) -> None:
    p.mkdir()


def _latin1(p: Path) -> None:
    p.write_bytes('[experiment]\nid = "caf\xe9"\n'.encode("latin-1"))


def _utf16(p: Path) -> None:
    p.write_bytes('[experiment]\nid = "x"\n'.encode("utf-16"))


def _loop(p: Path) -> None:
    os.symlink(p, p)


def _deep(p: Path) -> None:
    p.write_text("a = " + "[" * 100_000 + "]" * 100_000 + "\n")


def _long_string(p: Path) -> None:
    p.write_text(f'[experiment]\nid = "{"x" * 200_000}"\n')


def _binary(p: Path) -> None:
    p.write_bytes(bytes(range(256)) * 4)


def _truncated(p: Path) -> None:
    p.write_text(SMOKE.read_text()[:57])


def _empty(p: Path) -> None:
    p.write_text("")


def _missing(p: Path) -> None:
    pass


DATA_FILE_BREAKS: dict[str, Callable[[Path], None]] = {
    "a directory": _dir, "latin-1": _latin1, "utf-16 with BOM": _utf16, "symlink loop": _loop,
    "nested 100k deep": _deep, "200k-char string": _long_string, "binary": _binary, "truncated": _truncated,
    "empty": _empty, "missing": _missing,
}

# --- commands that read a data file: argv with {f} for the broken file, {d} for a results copy -----------------
DATA_FILE_COMMANDS = {
    "run": ["run", "{f}", "--out", "{t}/out", "--worlds", str(WORLDS)],
    "freeze": ["freeze", "{f}", "--worlds", str(WORLDS)],
    "validate": ["validate", "{f}"],
    "calibrate --cases": ["calibrate", "--cases", "{f}", "--worlds", str(WORLDS)],
    "check --expect": ["check", "{d}", "--expect", "{f}"],
}


@dataclass(frozen=True)
class Case:
    id: str
    argv: list[str]
    code: int
    prepare: Callable[[Path, Path], None] = lambda t, d: None  # (tmp folder, results copy)
    says: tuple[str, ...] = ()  # what the one line must name (the file, the flag, the value), when given


def _data_file_cases() -> list[Case]:
    out = []
    for cmd, argv in DATA_FILE_COMMANDS.items():
        for name, brk in DATA_FILE_BREAKS.items():
            def prepare(t: Path, d: Path, brk: Callable[[Path], None] = brk) -> None:
                brk(t / "bad.toml")
            out.append(Case(f"{cmd}: {name}", argv, 2, prepare))
    return out


# --- ways to break a results directory ------------------------------------------------------------------------
def _edit_table(fn: Callable[[pd.DataFrame], pd.DataFrame]) -> Callable[[Path, Path], None]:
    def prepare(t: Path, d: Path) -> None:
        df = pd.read_parquet(d / "results.parquet")
        fn(df).to_parquet(d / "results.parquet", index=False)
    return prepare


def _set(col: str, value: object) -> Callable[[pd.DataFrame], pd.DataFrame]:
    def fn(df: pd.DataFrame) -> pd.DataFrame:
        df[col] = df[col].astype(str if isinstance(value, str) else object)  # parquet needs one type per column
        df.loc[3, col] = value
        return df
    return fn


def _bytes(name: str, fn: Callable[[bytes], bytes]) -> Callable[[Path, Path], None]:
    def prepare(t: Path, d: Path) -> None:
        p = d / name
        p.write_bytes(fn(p.read_bytes()))
    return prepare


TABLE_BREAKS: dict[str, Callable[[Path, Path], None]] = {
    "truncated parquet": _bytes("results.parquet", lambda b: b[: len(b) // 2]),
    "garbage parquet": _bytes("results.parquet", lambda b: b"PAR1 not really"),
    "empty parquet file": _bytes("results.parquet", lambda b: b""),
    "NaN endpoint": _edit_table(_set("duplicate_effects", float("nan"))),
    "NaN recall": _edit_table(_set("recall", float("nan"))),
    "string endpoint": _edit_table(_set("unsafe_commits", "three")),
    "bool as y_goal string": _edit_table(_set("y_goal", "yes")),
    "missing column": _edit_table(lambda df: df.drop(columns=["incorrect_claim"])),
    "extra column": _edit_table(lambda df: df.assign(bonus=1)),
    "duplicate row": _edit_table(lambda df: pd.concat([df, df.iloc[[0]]], ignore_index=True)),
    "duplicate tuple": _edit_table(lambda df: pd.concat([df, df.iloc[[0]].assign(run_id="f" * 16)],
                                                        ignore_index=True)),
    "results removed": lambda t, d: (d / "results.parquet").unlink(),
}
TABLE_COMMANDS = {
    "analyze": ["analyze", "{d}", "--resamples", "50", "--permutations", "50"],
    "summarize": ["summarize", "{d}"],
    "report": ["report", "{d}", "--stale-ok"],
    "check": ["check", "{d}", "--expect", str(ROOT / "configs" / "ci_expect.toml"), "--stale-ok"],
}


def _table_cases() -> list[Case]:
    return [Case(f"{cmd}: {name}", argv, 2, brk) for cmd, argv in TABLE_COMMANDS.items()
            for name, brk in TABLE_BREAKS.items()]


def _write(name: str, content: bytes) -> Callable[[Path, Path], None]:
    def prepare(t: Path, d: Path) -> None:
        (d / name).write_bytes(content)
    return prepare


def _endless(name: str) -> Callable[[Path, Path], None]:
    def prepare(t: Path, d: Path) -> None:
        (d / name).unlink(missing_ok=True)
        (d / name).symlink_to("/dev/zero")
    return prepare


def _first_trace(d: Path) -> Path:
    return sorted((d / "traces").glob("*.jsonl"))[0]


def _expect(text: str) -> Callable[[Path, Path], None]:
    def prepare(t: Path, d: Path) -> None:
        (t / "bad.toml").write_text(text)
    return prepare


RUN_AGAIN = ["run", str(SMOKE), "--out", "{d}", "--worlds", str(WORLDS)]
OTHER_CASES = [
    # manifests, journals, lock files and traces of a results folder
    Case("run resume: truncated manifest", RUN_AGAIN, 2, _bytes("manifest.json", lambda b: b[: len(b) // 3])),
    Case("run resume: manifest is a list", RUN_AGAIN, 2, _write("manifest.json", b"[1, 2]")),
    Case("run resume: non-UTF-8 manifest", RUN_AGAIN, 2, _write("manifest.json", b"\xff\xfe{}")),
    Case("run resume: corrupt journal line", RUN_AGAIN, 2,
         _bytes("journal.jsonl", lambda b: b.replace(b'"row"', b'"rov"', 1))),
    Case("run resume: a finished run's trace deleted", RUN_AGAIN, 1, lambda t, d: _first_trace(d).unlink()),
    Case("run resume: a finished run's trace edited", RUN_AGAIN, 1,
         lambda t, d: _first_trace(d).write_text(_first_trace(d).read_text().replace('"seq":1', '"seq":7', 1))),
    Case("run resume: journal is endless (a link to /dev/zero)", RUN_AGAIN, 2, _endless("journal.jsonl"),
         ("journal.jsonl", "larger than")),
    Case("run resume: binary sessions.jsonl", RUN_AGAIN, 2, _write("sessions.jsonl", bytes(range(256)) * 4),
         ("sessions.jsonl", "not UTF-8")),
    Case("summarize: binary sessions.jsonl", ["summarize", "{d}"], 2, _write("sessions.jsonl", bytes(range(256)) * 4),
         ("sessions.jsonl", "not UTF-8")),
    Case("view: binary sessions.jsonl", ["view", "{d}", "--bundle", "{t}/site"], 2,
         _write("sessions.jsonl", bytes(range(256)) * 4), ("sessions.jsonl", "not UTF-8")),
    Case("view: binary failures.jsonl", ["view", "{d}", "--bundle", "{t}/site"], 2,
         _write("failures.jsonl", bytes(range(256)) * 4), ("failures.jsonl", "not UTF-8")),
    Case("audit: journal is endless (a link to /dev/zero)", ["audit", "{d}"], 1, _endless("journal.jsonl"),
         ("journal.jsonl", "larger than")),
    Case("audit: binary failures.jsonl", ["audit", "{d}"], 1, _write("failures.jsonl", bytes(range(256)) * 4),
         ("failures.jsonl", "not UTF-8")),
    Case("audit: truncated manifest", ["audit", "{d}"], 1, _bytes("manifest.json", lambda b: b[:10])),
    Case("audit: no manifest", ["audit", "{d}"], 2, lambda t, d: (d / "manifest.json").unlink()),
    Case("audit: missing folder", ["audit", "{t}/nowhere"], 2),
    Case("audit: --manuscript missing", ["audit", "{d}", "--manuscript", "{t}/paper.md"], 2, lambda t, d: None,
         ("{t}/paper.md", "--manuscript", "not found")),
    Case("audit: --manuscript binary", ["audit", "{d}", "--manuscript", "{t}/paper.md"], 2,
         lambda t, d: (t / "paper.md").write_bytes(bytes(range(256)) * 4), ("{t}/paper.md", "--manuscript", "UTF-8")),
    Case("audit: --manuscript a folder", ["audit", "{d}", "--manuscript", "{t}"], 2, lambda t, d: None,
         ("--manuscript", "directory")),
    Case("audit: corrupt journal", ["audit", "{d}"], 1,
         _bytes("journal.jsonl", lambda b: b.replace(b'"row"', b'"rov"', 1))),
    Case("audit: truncated parquet", ["audit", "{d}"], 1, _bytes("results.parquet", lambda b: b[:100])),
    Case("audit: NaN endpoint", ["audit", "{d}"], 1, _edit_table(_set("duplicate_effects", float("nan")))),
    Case("audit: trace deleted", ["audit", "{d}"], 1, lambda t, d: _first_trace(d).unlink()),
    Case("audit: trace re-serialized", ["audit", "{d}"], 1, lambda t, d: _first_trace(d).write_text(
        "\n".join(json.dumps(json.loads(ln)) for ln in _first_trace(d).read_text().splitlines()) + "\n")),
    Case("verify-trace: garbage", ["verify-trace", "{t}/bad.jsonl"], 1,
         lambda t, d: (t / "bad.jsonl").write_bytes(b"\x00\x01garbage")),
    Case("verify-trace: empty", ["verify-trace", "{t}/bad.jsonl"], 1, lambda t, d: (t / "bad.jsonl").write_text("")),
    Case("verify-trace: missing", ["verify-trace", "{t}/bad.jsonl"], 2),
    Case("verify-trace: a directory", ["verify-trace", "{t}"], 2),
    Case("verify-trace: wrong head", ["verify-trace", "{trace}", "--head", "0" * 64], 1),
    # analysis tables
    Case("report: stale analysis", ["report", "{d}"], 2, _edit_table(lambda df: df.iloc[::-1])),
    Case("check: stale analysis", ["check", "{d}", "--expect", str(ROOT / "configs" / "ci_expect.toml")], 2,
         _edit_table(lambda df: df.iloc[::-1])),
    Case("report: garbage meta.json", ["report", "{d}"], 2, _write("analysis/meta.json", b"{garbage")),
    Case("report: primary.json not a list", ["report", "{d}"], 2, _write("analysis/primary.json", b'{"a": 1}')),
    Case("check: truncated primary.json", ["check", "{d}", "--expect", str(ROOT / "configs" / "ci_expect.toml")],
         2, _bytes("analysis/primary.json", lambda b: b[: len(b) // 2])),
    Case("report: no analysis", ["report", "{d}"], 2, lambda t, d: shutil.rmtree(d / "analysis")),
    # expectation files
    Case("check: bound with 1.2.3", ["check", "{d}", "--expect", "{t}/bad.toml"], 2,
         _expect('bounds = ["duplicate_effects.utility_diff >= 1.2.3"]\n')),
    Case("check: non-numeric field", ["check", "{d}", "--expect", "{t}/bad.toml"], 2,
         _expect('bounds = ["duplicate_effects.endpoint > 0"]\n')),
    Case("check: unknown comparison", ["check", "{d}", "--expect", "{t}/bad.toml"], 2,
         _expect('bounds = ["x.utility_diff > 0"]\n')),
    Case("check: unknown field", ["check", "{d}", "--expect", "{t}/bad.toml"], 2,
         _expect('bounds = ["duplicate_effects.speed > 0"]\n')),
    Case("check: no bounds", ["check", "{d}", "--expect", "{t}/bad.toml"], 2, _expect("bounds = []\n")),
    Case("check: bounds not strings", ["check", "{d}", "--expect", "{t}/bad.toml"], 2, _expect("bounds = [1]\n")),
    # flags and folders
    Case("run: --out is a file", ["run", str(SMOKE), "--out", "{t}/file"], 2,
         lambda t, d: (t / "file").write_text("x")),
    Case("run: --out holds foreign files", ["run", str(SMOKE), "--out", "{t}/foreign"], 2,
         lambda t, d: ((t / "foreign").mkdir(), (t / "foreign" / "notes.txt").write_text("mine"))),
    Case("run: --workers 0", ["run", str(SMOKE), "--out", "{t}/out", "--workers", "0"], 2),
    Case("run: --worlds missing", ["run", str(SMOKE), "--out", "{t}/out", "--worlds", "{t}/nowhere"], 2),
    Case("run: --worlds is a file", ["run", str(SMOKE), "--out", "{t}/out", "--worlds", str(SMOKE)], 2),
    Case("list: --worlds missing", ["list", "workloads", "--worlds", "{t}/nowhere"], 2),
    Case("calibrate: --worlds is a file", ["calibrate", "--worlds", str(SMOKE)], 2),
    Case("summarize: missing folder", ["summarize", "{t}/nowhere"], 2),
    Case("analyze: a file, not a folder", ["analyze", str(SMOKE)], 2),
    Case("run: garbage lock file", ["run", "{t}/cfg/smoke.toml", "--out", "{t}/out", "--worlds", str(WORLDS)], 2,
         lambda t, d: ((t / "cfg").mkdir(), shutil.copy(SMOKE, t / "cfg" / "smoke.toml"),
                       (t / "cfg" / "smoke.lock.json").write_text("{not json"))),
    Case("run: lock file with inputs as a list", ["run", "{t}/cfg/smoke.toml", "--out", "{t}/out"], 2,
         lambda t, d: ((t / "cfg").mkdir(), shutil.copy(SMOKE, t / "cfg" / "smoke.toml"),
                       (t / "cfg" / "smoke.lock.json").write_text('{"inputs": [], "lock_hash": "x"}'))),
    Case("freeze: lock path is a folder (unwritable)", ["freeze", "{t}/cfg/smoke.toml", "--worlds", str(WORLDS)], 1,
         lambda t, d: ((t / "cfg").mkdir(), shutil.copy(SMOKE, t / "cfg" / "smoke.toml"),
                       (t / "cfg" / "smoke.lock.json").mkdir())),
]

# --- the hostile probe's values: each config is refused the same way by `validate` and by `run` ----------------
KEY = "sk-probeKEY0123456789abcdefXYZ"  # key-shaped: must appear in no output and no file
LLM = '[experiment]\nid = "h"\nworkloads = ["response_loss"]\n[[experiment.agents]]\nname = "llm"\n'
HOSTILE_CONFIGS = {
    "timeout_s inf": LLM + 'model = "openai/m"\napi_base = "offline"\ntimeout_s = inf\n',
    "timeout_s nan": LLM + 'model = "openai/m"\napi_base = "offline"\ntimeout_s = nan\n',
    "timeout_s 1e308": LLM + 'model = "openai/m"\napi_base = "offline"\ntimeout_s = 1e308\n',
    "timeout_s 0": LLM + 'model = "openai/m"\napi_base = "offline"\ntimeout_s = 0\n',
    "backoff_s 1e9": LLM + 'model = "openai/m"\napi_base = "offline"\nbackoff_s = 1e9\n',
    "negative price": LLM + 'model = "openai/m"\napi_base = "offline"\ninput_usd_per_mtok = -1\n'
                            'output_usd_per_mtok = 1\n',
    "price nan": LLM + 'model = "openai/m"\napi_base = "offline"\ninput_usd_per_mtok = nan\n'
                       'output_usd_per_mtok = 1\n',
    "malformed model": LLM + 'model = "openai/ m x"\napi_base = "offline"\n',
    "api_base not http": LLM + 'model = "openai/m"\napi_base = "ftp://127.0.0.1/v1"\n',
    "key in api_base": LLM + f'model = "openai/m"\napi_base = "http://127.0.0.1:9/v1?key={KEY}"\n',
    "user:password in api_base": LLM + 'model = "openai/m"\napi_base = "http://u:pw@127.0.0.1:9/v1"\n',
    "key in model": LLM + f'model = "openai/{KEY}"\napi_base = "offline"\n',
    "seed 2^63": '[experiment]\nid = "h"\nseeds = [9223372036854775808]\n',
    "negative seed": '[experiment]\nid = "h"\nseeds = [-1]\n',
    "max_cost_usd nan": '[experiment]\nid = "h"\nmax_cost_usd = nan\n',
    "max_cost_usd inf": '[experiment]\nid = "h"\nmax_cost_usd = inf\n',
    "rtt_ms inf": '[experiment]\nid = "h"\nworkloads = ["toolpro_sweep"]\n[[experiment.agents]]\nname = "program"\n'
                  'mode = "policy"\nrtt_ms = inf\ndecision_ms = 1\nbuild_ms = 1\n',
    "rtt_ms negative": '[experiment]\nid = "h"\nworkloads = ["toolpro_sweep"]\n[[experiment.agents]]\n'
                       'name = "program"\nmode = "policy"\nrtt_ms = -5\ndecision_ms = 1\nbuild_ms = 1\n',
}


def _catalog(t: Path, d: Path) -> None:
    """An imported catalog file (as `catalog import-mcp` writes it): one read tool approved, one pending."""
    (t / "cat.json").write_text(json.dumps({"source": {"server": "test"}, "tools": [
        {"name": "get_order", "description": "Read an order.", "effect": "read", "state": "approved"},
        {"name": "charge_payment", "description": "Charge an order.", "effect": "unknown", "state": "pending"}]}))


def _config(text: str) -> Callable[[Path, Path], None]:
    def prepare(t: Path, d: Path) -> None:
        (t / "h.toml").write_text(text)
    return prepare


HOSTILE_CASES = [Case(f"{cmd}: {name}", argv, 2, _config(text)) for name, text in HOSTILE_CONFIGS.items()
                 for cmd, argv in (("validate", ["validate", "{t}/h.toml"]),
                                   ("run", ["run", "{t}/h.toml", "--out", "{t}/out", "--worlds", str(WORLDS)]))]
HOSTILE_CASES += [
    Case("run: the offline model has no such policy",  # refused by preflight: no folder, not a 400 per tuple
         ["run", "{t}/h.toml", "--out", "{t}/out", "--worlds", str(WORLDS)], 2,
         _config('[experiment]\nid = "h"\ncomparisons = ["duplicate_effects"]\ntasks_per_workload = 1\n'
                 '[[experiment.agents]]\nname = "llm"\nmodel = "openai/fake-bogus"\napi_base = "offline"\n'),
         ("h.toml", "'openai/fake-bogus'", "capability, naive")),
    Case("run: --max-cost nan", ["run", str(SMOKE), "--out", "{t}/out", "--max-cost", "nan"], 2),
    Case("run: --max-cost inf", ["run", str(SMOKE), "--out", "{t}/out", "--max-cost", "inf"], 2),
    Case("run: --max-cost -1", ["run", str(SMOKE), "--out", "{t}/out", "--max-cost", "-1"], 2),
    Case("analyze: --resamples 0", ["analyze", "{d}", "--resamples", "0"], 2),
    Case("analyze: --permutations 0", ["analyze", "{d}", "--permutations", "0"], 2),
    Case("serve: --port 99999", ["serve", "--workload", "response_loss", "--task", "rl-01-o1", "--condition", "I5",
                                 "--transport", "http", "--port", "99999", "--out", "{t}/s"], 2),
    Case("serve: --host with a key", ["serve", "--workload", "response_loss", "--task", "rl-01-o1", "--condition",
                                      "I5", "--transport", "http", "--host", f"{KEY}.invalid", "--out", "{t}/s"], 2),
    Case("fake-llm: --latency -1", ["fake-llm", "--latency", "-1"], 2),
    Case("fake-llm: --port 70000", ["fake-llm", "--port", "70000"], 2),
    Case("view: not a results folder", ["view", "{t}"], 2),
    Case("view: --bundle target exists", ["view", "{d}", "--bundle", "{d}"], 2),
    # the catalog review cycle: contradictory states, a session of no tools (the catalog file is left as it was)
    Case("catalog review: one tool under --approve and --block",
         ["catalog", "review", "{t}/cat.json", "--approve", "get_order", "--block", "get_order", "--effect", "read"],
         2, _catalog, ("--approve", "--block", "'get_order'")),
    Case("catalog review: one tool under --block and --pin",
         ["catalog", "review", "{t}/cat.json", "--block", "charge_payment", "--pin", "get_order", "charge_payment",
          "--effect", "read"], 2, _catalog, ("--block", "--pin", "'charge_payment'")),
    Case("catalog resolve: --k 0", ["catalog", "resolve", "{t}/cat.json", "read the order", "--k", "0"], 2, _catalog,
         ("--k", "0")),
    Case("catalog resolve: --k -3", ["catalog", "resolve", "{t}/cat.json", "read the order", "--k", "-3"], 2,
         _catalog, ("--k", "-3")),
]

CASES = _data_file_cases() + _table_cases() + OTHER_CASES + HOSTILE_CASES


def test_the_suite_is_as_large_as_the_readme_says() -> None:
    readme = (ROOT / "docs" / "running.md").read_text()
    assert f"{len(CASES)} malformed-input cases" in readme


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input_is_one_line_an_exit_code_and_nothing_written(case: Case, smoke_results: Path, tmp_path: Path,
                                                                capsys) -> None:
    d = tmp_path / "results"
    shutil.copytree(smoke_results, d, ignore=shutil.ignore_patterns(".runner.lock"))
    case.prepare(tmp_path, d)
    trace = str(_first_trace(d)) if (d / "traces").is_dir() and any((d / "traces").iterdir()) else ""
    argv = [a.format(t=tmp_path, d=d, f=tmp_path / "bad.toml", trace=trace) for a in case.argv]
    before = _snapshot(tmp_path)
    code = main(argv)
    captured = capsys.readouterr()
    lines = [ln for ln in captured.err.splitlines() if ln.strip()]
    assert code == case.code, (case.id, captured.err, captured.out[-500:])
    assert "Traceback" not in captured.err + captured.out
    if case.argv[0] == "audit" and code == 1:  # a failed audit prints its checks on stdout, FAIL named
        assert "FAIL" in captured.out and not lines, captured
        fails = [ln for ln in captured.out.splitlines() if ln.startswith("FAIL")]
        assert all(any(w in ln for ln in fails) for w in case.says), (case.id, case.says, fails)
    else:
        assert len(lines) == 1 and lines[0].startswith("aft-bench: "), (case.id, captured.err)
        assert all(w.format(t=tmp_path, d=d) in lines[0] for w in case.says), (case.id, case.says, lines[0])
    after = _snapshot(tmp_path)
    after.pop("results/.runner.lock", None)  # a resume takes the runner lock (an empty file) before refusing
    assert after == before, (case.id, set(after.items()) ^ set(before.items()))
    assert KEY not in captured.err + captured.out  # a refused key is not echoed back either
    assert not [p for p in tmp_path.rglob("*") if p.is_file() and p.name != "h.toml" and KEY.encode() in p.read_bytes()]


# --- the offline model server (`aft-bench fake-llm`) against malformed requests: a 400 (or 413) naming the header or
# the body's problem, as JSON, and nothing on the server's terminal; the server goes on answering ----------------------
CHAT = ("POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        "Connection: close\r\n")
FAKE_LLM_REQUESTS = {
    "Content-Length not a number": (CHAT + "Content-Length: twelve\r\n\r\n{}").encode(),
    "negative Content-Length": (CHAT + "Content-Length: -5\r\n\r\n{}").encode(),
    "Content-Length 1e3": (CHAT + "Content-Length: 1e3\r\n\r\n{}").encode(),
    "Content-Length beyond any body": (CHAT + f"Content-Length: {10 ** 15}\r\n\r\n{{}}").encode(),
    "body nested 100k deep": (CHAT + f"Content-Length: {200_000}\r\n\r\n").encode() + b"[" * 100_000 + b"]" * 100_000,
    "body nested 500 deep": (CHAT + f"Content-Length: {1_000}\r\n\r\n").encode() + b"[" * 500 + b"]" * 500,
}
FAKE_LLM_SAYS = {  # the status and what the error message names
    "Content-Length not a number": (400, "Content-Length"), "negative Content-Length": (400, "Content-Length"),
    "Content-Length 1e3": (400, "Content-Length"), "Content-Length beyond any body": (413, "Content-Length"),
    "body nested 100k deep": (400, "nested"), "body nested 500 deep": (400, "nested")}


def _exchange(port: int, request: bytes) -> bytes:
    import socket

    with socket.create_connection(("127.0.0.1", port), timeout=20) as s:
        s.sendall(request)
        s.shutdown(socket.SHUT_WR)
        answer = b""
        while chunk := s.recv(65536):
            answer += chunk
    return answer


@pytest.mark.parametrize("name", list(FAKE_LLM_REQUESTS))
def test_fake_llm_answers_a_malformed_request_with_an_error_naming_it_and_prints_nothing(name: str, capfd) -> None:
    from aft_bench.agents.fake_llm import FakeModel, serve

    server = serve(FakeModel({}))
    try:
        capfd.readouterr()
        answer = _exchange(server.server_port, FAKE_LLM_REQUESTS[name])
        status, named = FAKE_LLM_SAYS[name]
        head, _, body = answer.partition(b"\r\n\r\n")
        assert head.startswith(f"HTTP/1.1 {status} ".encode()), (name, answer[:300])
        assert named in json.loads(body)["error"]["message"], (name, body[:300])
        plain = (CHAT + "Content-Length: 2\r\n\r\n{}").encode()  # the server goes on: a well-formed request is
        assert _exchange(server.server_port, plain).startswith(b"HTTP/1.1 400 ")  # answered (no model: a 400)
        captured = capfd.readouterr()
        assert captured.err == "" and captured.out == "", (name, captured.err[-500:])
    finally:
        server.shutdown()
        server.server_close()


# --- resources and the order of what is said -------------------------------------------------------------------------
def _cli(argv: list[str], limit_kb: int | None = None, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    """`aft-bench ARGV` in its own process (under `ulimit -v LIMIT_KB` when given): its stderr as a terminal sees it."""
    cmd = [sys.executable, "-m", "aft_bench.cli", *argv]
    if limit_kb is not None:
        cmd = ["bash", "-c", f'ulimit -v {limit_kb} && exec "$@"', "bash", *cmd]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT)


def test_analyze_under_a_500_mb_address_space_limit_says_memory_is_short(smoke_results: Path, tmp_path: Path) -> None:
    """Under `ulimit -v 500000` analyze spun in scipy's OpenBLAS (its buffer allocation retried forever) or, before
    that, said 'internal error: MemoryError': now one line that memory is short, exit 1, at once, nothing written."""
    d = tmp_path / "results"
    shutil.copytree(smoke_results, d, ignore=shutil.ignore_patterns(".runner.lock"))
    before = _snapshot(tmp_path)
    t0 = time.monotonic()
    proc = _cli(["analyze", str(d), "--resamples", "50", "--permutations", "50"], limit_kb=500_000, timeout=120)
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 1, (proc.returncode, proc.stderr[-800:])
    assert "Traceback" not in proc.stderr + proc.stdout
    assert len(lines) == 1 and lines[0].startswith("aft-bench: error: memory is short"), lines
    assert "limit" in lines[0] and "ulimit -v" in lines[0], lines[0]
    assert time.monotonic() - t0 < 60
    assert _snapshot(tmp_path) == before


def test_a_note_never_precedes_the_failure_it_comes_with(tmp_path: Path) -> None:
    """A run whose provider is down (an llm agent at a closed port), with --workers far above the cap: the lines
    saying what failed come first, the note on --workers after them."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again when the run starts: connections are refused
    cfg = tmp_path / "closed.toml"
    cfg.write_text('[experiment]\nid = "closed"\ncomparisons = ["duplicate_effects"]\ntasks_per_workload = 1\n'
                   '[[experiment.agents]]\nname = "llm"\nmodel = "openai/fake-capability"\n'
                   f'api_base = "http://127.0.0.1:{port}/v1"\nretries = 0\ntimeout_s = 5\n')
    proc = _cli(["run", str(cfg), "--out", str(tmp_path / "out"), "--workers", "64", "--worlds", str(WORLDS)])
    # what the command says (progress lines, printed every 10 s on a slow machine, are not sayings)
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("aft-bench:")]
    assert proc.returncode == 1, proc.stderr[-800:]
    assert "Traceback" not in proc.stderr + proc.stdout
    notes = [i for i, ln in enumerate(lines) if ln.startswith("aft-bench: note:")]
    said = [i for i, ln in enumerate(lines) if not ln.startswith("aft-bench: note:")]
    assert notes and said, lines
    assert max(said) < min(notes), lines  # no note stands before (or between) the lines saying what failed
    assert lines[0].startswith("aft-bench: run ") and "failed" in lines[0], lines
