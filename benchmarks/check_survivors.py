"""Apply each of the seven semantic mutants an audit found surviving (issue 23) to a scratch copy of the code and
check that its test in tests/test_survivors.py now fails (and that it passes on the unmutated copy).

    .venv/bin/python benchmarks/check_survivors.py [--keep]

Exit 1 if any mutant survives. The copy is `git worktree add` of HEAD plus the working tree's test file, in a
temporary folder; nothing in this checkout is changed.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

from scratch_tree import scratch_tree

ROOT = Path(__file__).resolve().parents[1]
TESTS = "tests/test_survivors.py"

# (name, file, original text, mutated text, test selector)
MUTANTS = [
    ("outcome precedence", "aft_bench/judge/labels.py",
     '    if unsafe:\n        return "unsafely_committed"\n    if not ended:\n        return "unresolved"\n',
     '    if not ended:\n        return "unresolved"\n    if unsafe:\n        return "unsafely_committed"\n',
     "unsafe_commits_without_a_decision"),
    ("SQLite compensation", "aft_bench/world/sqlite_store.py",
     'any(t["ref"] == ref for t in e["targets"])', 'any(t == ref for t in e["targets"])',
     "compensated_charge_is_compensated"),
    ("criterion direction", "aft_bench/analysis/analyze.py",
     'return bool(p < ALPHA and (row["utility_diff"] or 0) > 0)', "return bool(p < ALPHA)",
     "favours_the_control"),
    ("missing recovery", "aft_bench/analysis/pairs.py", "col.fillna(False)", "col.fillna(True)",
     "interruption_never_fired"),
    ("retries", "aft_bench/agents/llm.py", "cost_usd=cost, retries=attempt,", "cost_usd=cost, retries=attempt + 1,",
     "retries_count_repeated_calls"),
    ("replay history", "aft_bench/interface/programs.py", "self.history += self.log", "self.history = self.log",
     "completed_before_two_repairs"),
    ("incorrect claim without a claim", "aft_bench/episode/row.py", '"incorrect_claim": int(lb.incorrect_claim),',
     '"incorrect_claim": int(lb.claim_correct is False),', "ends_with_no_claim"),
]


def pytest(copy: Path, selector: str) -> bool:
    """Whether the selected tests pass in `copy` (its own package first on the path)."""
    env = {**os.environ, "PYTHONPATH": str(copy)}
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-x", TESTS, "-k", selector],
                       cwd=copy, env=env, capture_output=True, text=True)
    return r.returncode == 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--keep", action="store_true", help="keep the scratch copy")
    args = ap.parse_args()
    with scratch_tree("aft-survivors-", args.keep) as copy:
        shutil.copy(ROOT / TESTS, copy / TESTS)
        survived = []
        for name, rel, original, mutated, selector in MUTANTS:
            path = copy / rel
            text = path.read_text()
            assert text.count(original) == 1, f"{rel}: the line to mutate is not there once: {original!r}"
            clean = pytest(copy, selector)
            path.write_text(text.replace(original, mutated))
            killed = not pytest(copy, selector)
            path.write_text(text)
            verdict = "killed" if clean and killed else ("SURVIVED" if clean else "test fails unmutated")
            print(f"{name:<34} {rel:<34} {verdict}", flush=True)
            if verdict != "killed":
                survived.append(name)
        print(f"{len(MUTANTS) - len(survived)}/{len(MUTANTS)} mutants killed")
        return 1 if survived else 0


if __name__ == "__main__":
    sys.exit(main())
