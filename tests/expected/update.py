"""Rewrite a stored label expectation from a results directory (a deliberate act: labels changed on purpose).

    .venv/bin/python tests/expected/update.py CONFIG_ID RESULTS_DIR

Writes `tests/expected/CONFIG_ID.csv.gz` (key columns + labels, sorted by key, no run ids) and copies
`RESULTS_DIR/analysis/primary.csv` to `tests/expected/CONFIG_ID.primary.csv`. `test_expected.py` compares
fresh runs of the config against both.
"""

from __future__ import annotations

import gzip
import shutil
import sys
from pathlib import Path

import pandas as pd

HERE = Path(__file__).resolve().parent
KEYS = ["world", "backend", "workload", "task_id", "condition", "fault", "fault_seed", "catalog_size", "agent",
        "model", "rep"]
LABELS = ["fault_fired", "outcome", "y_goal", "y_correct", "recovered", "duplicate_effects", "unsafe_commits",
          "unauthorized_effects", "stale_writes", "unintended_effects", "residual_effects", "terminal_action",
          "terminal_claim", "claim_correct", "incorrect_claim", "context_tokens", "recall", "tool_calls",
          "model_turns"]


def table(results: Path) -> str:
    """The expectation text of a results directory: one CSV line per run, sorted by its key columns."""
    df = pd.read_parquet(results / "results.parquet")
    if "agent" not in df.columns:  # results made before the agent registry named the agent `controller`
        df = df.rename(columns={"controller": "agent"})
    df = df[KEYS + LABELS].sort_values(KEYS, na_position="first", kind="stable")
    return df.to_csv(index=False, lineterminator="\n")


def main() -> None:
    config, results = sys.argv[1], Path(sys.argv[2])
    with gzip.GzipFile(HERE / f"{config}.csv.gz", "wb", mtime=0) as fh:
        fh.write(table(results).encode())
    shutil.copyfile(results / "analysis" / "primary.csv", HERE / f"{config}.primary.csv")


if __name__ == "__main__":
    main()
