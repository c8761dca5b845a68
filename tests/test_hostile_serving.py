"""The last hostile inputs of issue 40 on the serving and file-writing side, each a case a probe found unclean
(each failed before its fix): a host name the IDNA codec refuses, an empty or unbalanced --client-cmd, a file
that cannot be written naming no file, the working folder deleted under a run, a row journaled and its parquet
refused inside serve's task group, and a refused connection reported as a provider's 500. Each ends with exit
2 (bad input) or 1 (output), one line, no traceback, and nothing created or lost."""

from __future__ import annotations

import asyncio
import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest
from mcp import Client

from aft_bench.cli.main import main
from aft_bench.common.net import free_port, wait_for_port
from aft_bench.experiment.journal import read_rows

from conftest import ROOT, WORLDS

EXE = str(Path(sys.executable).with_name("aft-bench"))
ENV_ROOT = {"PYTHONPATH": str(ROOT)}


def _one_line(err: str) -> str:
    lines = [ln for ln in err.strip().splitlines() if ln.startswith("aft-bench:")]
    assert "Traceback" not in err, err[-1500:]
    assert len(lines) == 1, err
    return lines[0]


@pytest.mark.parametrize("argv", [
    ["serve", "--workload", "response_loss", "--task", "rl-01-o1", "--condition", "I5", "--transport", "http",
     "--host", "not..a..host"],
    ["view", "{out}", "--host", "not..a..host"],
])
def test_a_host_the_idna_codec_refuses_is_bad_input_naming_host(tmp_path: Path, capsys, argv: list[str]) -> None:
    out = tmp_path / "o"
    if argv[0] == "view":
        assert main(["run", str(ROOT / "configs" / "smoke.toml"), "--out", str(out)]) == 0
        capsys.readouterr()
    given = [a.replace("{out}", str(out)) for a in argv] + (["--out", str(tmp_path / "s")] if argv[0] == "serve" else [])
    assert main(given) == 2
    line = _one_line(capsys.readouterr().err)
    assert "--host" in line and "not..a..host" in line
    assert not (tmp_path / "s").exists()


@pytest.mark.parametrize("cmd", ["", "   ", 'echo "unbalanced'])
def test_an_empty_or_unsplittable_client_command_is_refused_before_anything_is_created(tmp_path: Path, capsys,
                                                                                      cmd: str) -> None:
    out = tmp_path / "o"
    assert main(["serve-matrix", str(ROOT / "interop" / "interop.toml"), "--out", str(out), "--worlds", str(WORLDS),
                 "--client-cmd", cmd]) == 2
    assert "--client-cmd" in _one_line(capsys.readouterr().err)
    assert not out.exists()


# A process under a file-size limit must not write Python's bytecode cache: a .pyc cut short by the limit is
# renamed into place and breaks every later import of that module (seen: "marshal data too short").
NO_PYC = {"PYTHONDONTWRITEBYTECODE": "1"}


def _limited(limit: int):  # noqa: ANN202 - a preexec_fn
    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return apply


def test_a_catalog_that_cannot_be_rewritten_names_its_file(tmp_path: Path) -> None:
    """A full disk (here a file-size limit: EFBIG, which names no file, as ENOSPC does not either): the catalog
    review names the catalog it could not rewrite, exit 1, and the catalog is as it was."""
    catalog = _a_catalog(tmp_path)
    before = catalog.read_bytes()
    name = json.loads(before)["tools"][0]["name"]
    res = subprocess.run([EXE, "catalog", "review", str(catalog), "--approve", name, "--effect", "read"],
                         capture_output=True, text=True,
                         preexec_fn=_limited(len(before) // 2), env={**ENV_ROOT, **NO_PYC, "PATH": "/usr/bin:/bin"})
    assert res.returncode == 1
    line = _one_line(res.stderr)
    assert str(catalog) in line and "File too large" in line
    assert catalog.read_bytes() == before and not list(tmp_path.glob("*.tmp"))


def _a_catalog(tmp_path: Path) -> Path:
    """A catalog file imported from a real MCP server (this project's own `serve`, over stdio)."""
    catalog = tmp_path / "catalog.json"
    server = (f"{EXE} serve --workload response_loss --task rl-01-o1 --condition I4 --out {tmp_path / 'srv'} "
              f"--worlds {WORLDS}")
    res = subprocess.run([EXE, "catalog", "import-mcp", "--out", str(catalog), "--cmd", server], capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-800:]
    return catalog


def test_the_working_folder_deleted_under_a_run_is_named(tmp_path: Path) -> None:
    gone = tmp_path / "gone"
    gone.mkdir()
    script = (f"import os, sys; os.chdir({str(gone)!r}); os.rmdir({str(gone)!r}); "
              f"from aft_bench.cli.main import main; "
              f"sys.exit(main(['run', {str(ROOT / 'configs' / 'smoke.toml')!r}, '--out', {str(tmp_path / 'o')!r}]))")
    res = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=ENV_ROOT, timeout=120)
    assert res.returncode == 1
    assert "the working folder (deleted while the command ran)" in _one_line(res.stderr)
    assert not (tmp_path / "o").exists()


def test_serve_names_the_file_it_could_not_write_when_its_session_ends(tmp_path: Path) -> None:
    """Under a file-size limit the row is journaled and results.parquet refused inside the HTTP app's task group:
    one line (not 'internal error: ExceptionGroup'), exit 1, the row kept once in the journal."""
    port = free_port()
    out = tmp_path / "o"
    proc = subprocess.Popen([EXE, "serve", "--workload", "response_loss", "--task", "rl-01-o1", "--condition", "I5",
                             "--transport", "http", "--port", str(port), "--out", str(out), "--worlds", str(WORLDS),
                             "--agent", "a"], stderr=subprocess.PIPE, text=True, preexec_fn=_limited(12_000),
                            env={**os.environ, **NO_PYC})

    async def play() -> None:
        async with Client(f"http://127.0.0.1:{port}/mcp", mode="legacy") as c:
            await c.call_tool("report_outcome", {"action": "refuse", "claim": "failure"})

    try:
        assert wait_for_port(port, 20.0, alive=lambda: proc.poll() is None)
        asyncio.run(play())
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 1
    line = [ln for ln in err.splitlines() if ln.startswith("aft-bench: error:")]
    assert len(line) == 1 and "File too large" in line[0] and "Traceback" not in err, err[-1500:]
    assert len(read_rows(out / "journal.jsonl")) == 1  # journaled once, never twice


def test_a_refused_connection_is_named_not_called_a_provider_s_500(tmp_path: Path, capsys) -> None:
    port = free_port()  # nothing listens there
    cfg = tmp_path / "r.toml"
    cfg.write_text('[experiment]\nid = "r"\nworkloads = ["response_loss"]\nconditions = ["I5"]\ntasks_per_workload = 1\n'
                   f'[[experiment.agents]]\nname = "llm"\nmodel = "openai/x"\napi_base = "http://127.0.0.1:{port}/v1"\n'
                   'retries = 1\nbackoff_s = 0.01\n')
    assert main(["run", str(cfg), "--out", str(tmp_path / "o")]) == 1
    err = capsys.readouterr().err
    assert f"connection refused at 127.0.0.1:{port}" in err and "status 500" not in err
    failure = json.loads((tmp_path / "o" / "failures.jsonl").read_text().splitlines()[-1])
    assert f"connection refused at 127.0.0.1:{port}" in failure["message"]


HTML_SERVER = """
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer

class Page(BaseHTTPRequestHandler):
    def answer(self):
        body = b"<html><body>a web page, not MCP</body></html>"
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    do_GET = do_POST = do_DELETE = answer
    def log_message(self, *args):
        pass

HTTPServer(("127.0.0.1", int(sys.argv[1])), Page).serve_forever()
"""


def test_importing_a_page_that_is_not_mcp_is_one_line_naming_what_came_back(tmp_path: Path) -> None:
    script = tmp_path / "page.py"
    script.write_text(HTML_SERVER)
    port = free_port()
    page = subprocess.Popen([sys.executable, str(script), str(port)])
    try:
        assert wait_for_port(port, 10.0, alive=lambda: page.poll() is None)
        res = subprocess.run([EXE, "catalog", "import-mcp", "--url", f"http://127.0.0.1:{port}/mcp", "--out",
                              str(tmp_path / "c.json")], capture_output=True, text=True, timeout=120)
    finally:
        page.kill()
        page.wait()
    assert res.returncode == 2 and res.stdout == ""
    line = _one_line(res.stderr)
    assert "--url" in line and "text/html" in line and "ExceptionGroup" not in line
    assert not (tmp_path / "c.json").exists()


def test_a_stdio_server_printing_junk_is_imported_without_the_sdk_s_traceback(tmp_path: Path) -> None:
    server = tmp_path / "junk.sh"
    server.write_text(f"#!/bin/sh\necho 'this is not JSON-RPC'\nexec {EXE} serve --workload response_loss --task "
                      f"rl-01-o1 --condition I4 --out {tmp_path / 'srv'} --worlds {WORLDS}\n")
    server.chmod(0o755)
    res = subprocess.run([EXE, "catalog", "import-mcp", "--cmd", str(server), "--out", str(tmp_path / "c.json")],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-800:]
    assert res.stderr == "" and "tools from aft-bench" in res.stdout
    assert json.loads((tmp_path / "c.json").read_text())["tools"]


def test_a_server_slower_than_the_listing_deadline_says_how_to_give_it_longer(tmp_path: Path, capsys) -> None:
    assert main(["catalog", "import-mcp", "--cmd", "sleep 60", "--timeout", "1", "--out",
                 str(tmp_path / "c.json")]) == 2
    line = _one_line(capsys.readouterr().err)
    assert "within 1 s" in line and "--timeout SECONDS" in line
    assert main(["catalog", "import-mcp", "--cmd", "sleep 60", "--timeout", "0", "--out",
                 str(tmp_path / "c.json")]) == 2  # a deadline of nothing is refused as a flag
    assert "--timeout" in _one_line(capsys.readouterr().err)
