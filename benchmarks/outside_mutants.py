"""Apply each of the 40 outside mutants of the real-server code (issue 49; `benchmarks/outside_mutants/`, written by
a session that read the code but no test) to a scratch copy of HEAD, and run every test file that names the
mutated module against it: a mutant is killed when one of them fails. The paper lock's own test is left out (it
fails for any edit of the code it hashes, which is no kill).

    .venv/bin/python benchmarks/outside_mutants.py [--only 03 15] [--timeout 1500] [--keep]

Prints one line per mutant (verdict, seconds, the first failing test) and the kill rate; exit 1 if any survives.
The copy is `git worktree add` of HEAD in a temporary folder; nothing in this checkout is changed.
"""

from __future__ import annotations

import argparse
import ast
import os
import re
import subprocess
import sys
import time
from pathlib import Path

from scratch_tree import scratch_tree

ROOT = Path(__file__).resolve().parents[1]
PATCHES = ROOT / "benchmarks" / "outside_mutants"
LOCK_TEST = "tests/test_architecture.py::test_the_committed_paper_lock_matches_the_code_and_data"


def patched_file(patch: Path) -> str:
    """The one file a mutant's patch changes, as a path from the repository root."""
    files = re.findall(r"^\+\+\+ b/(\S+)$", patch.read_text(), flags=re.M)
    if len(files) != 1:
        sys.exit(f"{patch}: a mutant changes one file; this patch changes {files}")
    return files[0]


def names_module(test: Path, rel: str) -> bool:
    """Whether a test file names the module `rel` (aft_bench/pkg/mod.py): imports it, imports from it, or spells
    its dotted name or path."""
    dotted = rel.removesuffix(".py").replace("/", ".")
    package, _, module = dotted.rpartition(".")
    text = test.read_text(encoding="utf-8")
    if dotted in text or rel in text:
        return True
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.ImportFrom) and node.module == package and any(a.name == module for a in node.names):
            return True
    return False


def run(copy: Path, files: list[str], timeout: float) -> tuple[str, float, str]:
    """(verdict, seconds, first failing test) of the test files in `copy`, its own package first on the path."""
    env = {**os.environ, "PYTHONPATH": str(copy)}
    env.setdefault("AFT_BENCH_SERVERS", str(ROOT / ".worlds"))
    t0 = time.monotonic()
    try:
        done = subprocess.run([sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:randomly", "-p",
                               "no:cacheprovider", "--deselect", LOCK_TEST, *files], cwd=copy, env=env,
                              capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return "timeout", time.monotonic() - t0, ""
    first = next((ln for ln in done.stdout.splitlines() if ln.startswith(("FAILED ", "ERROR "))), "")
    return ("survived" if done.returncode == 0 else "killed"), time.monotonic() - t0, first[:160]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", nargs="*", default=None, help="mutant numbers (e.g. 03 15); all by default")
    ap.add_argument("--timeout", type=float, default=1500.0, help="seconds per mutant; a mutant that hangs the "
                                                                   "tests past it counts as killed, as mutmut counts one")
    ap.add_argument("--keep", action="store_true", help="keep the scratch copy")
    args = ap.parse_args()
    patches = sorted(PATCHES.glob("*.patch"))
    if args.only:
        patches = [p for p in patches if p.stem in args.only]
        missing = set(args.only) - {p.stem for p in patches}
        if missing:
            sys.exit(f"--only: no patch {sorted(missing)} in {PATCHES}")
    with scratch_tree("aft-outside-", args.keep) as copy:
        tests = sorted((copy / "tests").glob("test_*.py"))
        survived = []
        for patch in patches:
            rel = patched_file(patch)
            files = [str(t.relative_to(copy)) for t in tests if names_module(t, rel)]
            applied = subprocess.run(["git", "apply", str(patch)], cwd=copy, capture_output=True, text=True)
            if applied.returncode != 0:
                sys.exit(f"{patch.name} does not apply to HEAD: {applied.stderr.strip()}")
            try:
                verdict, took, first = run(copy, files, args.timeout)
            finally:
                subprocess.run(["git", "checkout", "-q", "--", "."], cwd=copy, check=True)
            print(f"{patch.stem} {rel:<40} {verdict:<8} {took:6.0f} s  {len(files):2d} files  {first}", flush=True)
            if verdict == "survived":
                survived.append(patch.stem)
        print(f"{len(patches) - len(survived)}/{len(patches)} outside mutants killed"
              + (f"; survived: {' '.join(survived)}" if survived else ""))
        return 1 if survived else 0


if __name__ == "__main__":
    sys.exit(main())
