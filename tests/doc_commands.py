"""Running the `aft-bench` lines of the README and the docs as a reader would, on the shipped files: results/pd is
the smoke results, any other results/NAME a fresh folder, optional [..] parts dropped; a freeze, the full paper
matrix and a server that waits for its client run as --help (test_serve.py drives real servers)."""

from __future__ import annotations

import re
import shlex
import shutil
from pathlib import Path
from typing import Any

import pandas as pd

from aft_bench.cli.main import main

ROOT = Path(__file__).resolve().parent.parent


class DocRunner:
    """One copy of the smoke results per test, and the substitutions every documented command line gets."""

    def __init__(self, smoke_results: Path, tmp_path: Path) -> None:
        self.tmp = tmp_path
        self.pd = tmp_path / "pd"
        shutil.copytree(smoke_results, self.pd, ignore=shutil.ignore_patterns(".runner.lock"))
        self.trace = sorted((self.pd / "traces").glob("*.jsonl"))[0]
        self.head = pd.read_parquet(self.pd / "results.parquet").set_index("run_id").loc[self.trace.stem,
                                                                                          "trace_head"]

    def argv(self, line: str) -> list[str]:
        line = re.sub(r"\s*\[[^\]]*\]", "", line)
        line = line.replace("results/pd/traces/<run_id>.jsonl", str(self.trace)).replace("<trace_head>", self.head)
        line = line.replace("results/pd", str(self.pd))
        line = re.sub(r"(?<![\w/])results/(\w+)", lambda m: str(self.tmp / m.group(1)), line)
        argv = shlex.split(line)[1:]
        argv = [str(p) for a in argv for p in (sorted(ROOT.glob(a)) if "*" in a else [a])]
        argv = [str(ROOT / a) if (ROOT / a).exists() and not Path(a).is_absolute() else a for a in argv]
        if argv[0] in ("freeze",) or "paper_deterministic.toml" in line and argv[0] == "run" or \
                argv[0] == "serve" and "--show-task" not in argv:  # a server waits for its client: --help
            argv = [argv[0], "--help"]
        return argv

    def run(self, line: str, capsys: Any) -> tuple[list[str], int, Any]:
        """(argv, exit code, captured output) of one documented line."""
        argv = self.argv(line)
        try:
            code = main(argv)
        except SystemExit as exc:  # --help
            code = int(exc.code or 0)
        return argv, code, capsys.readouterr()
