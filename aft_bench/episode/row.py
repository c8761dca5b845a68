"""The results table: one row per run, its documented columns, and atomic parquet writing."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Iterable

COLUMNS: dict[str, str] = {
    "run_id": "hash of the run tuple (the key fields below)",
    "world": "world id (`catalog` for generated discovery catalogs)",
    "backend": "backend implementation (`memory`)",
    "workload": "workload id",
    "task_id": "task id (the task cluster of the statistics)",
    "condition": "interface condition name (I0..I5, I5-<mechanism>)",
    "fault": "fault variant of the workload (`none` if no fault)",
    "fault_seed": "seed from which the fault realization (and catalog) is drawn",
    "catalog_size": "number of tools in the discovery catalog (null elsewhere)",
    "controller": "controller (`deterministic`)",
    "model": "model identifier (`none` for the deterministic controller)",
    "rep": "repetition index",
    "mechanisms": "resolved mechanism settings of the condition, as JSON",
    "fault_fired": "every planned fault fired (null when none was planned)",
    "outcome": "outcome class",
    "y_goal": "requested postcondition holds in the terminal state",
    "y_correct": "policy acceptance and trace safety both hold",
    "recovered": "every interrupted invocation was continued with its work kept (null without interruption)",
    "duplicate_effects": "commits re-realizing an already realized logical effect",
    "unsafe_commits": "commits that were duplicate, unauthorized, stale or unintended",
    "unauthorized_effects": "commits by a principal lacking the permission at the commit point",
    "stale_writes": "commits over a change the agent had not seen",
    "unintended_effects": "commits outside what the task asked or its policy allowed",
    "residual_effects": "uncompensated effects left behind when the goal does not hold",
    "terminal_action": "finish | abort | refuse | escalate | budget_exhausted | none",
    "terminal_claim": "success | failure | unknown (null without a terminal decision)",
    "claim_correct": "the terminal claim matches the terminal state (null without a claim)",
    "incorrect_claim": "1 if the claim was false success, false failure or otherwise incorrect, else 0",
    "context_tokens": "tokens of tool text shown to the agent (surface, search cards, loaded schemas)",
    "recall": "share of the task's required capabilities that were shown to the agent",
    "tool_calls": "calls that reached the pipeline (invocations, resumes, status, verification)",
    "model_turns": "controller decisions (one per action)",
    "wall_s": "wall-clock seconds of the run (monotonic clock; not part of any label)",
    "trace_head": "hash of the sealed trace's last event",
    "world_hash": "hash of the world manifest",
    "task_hash": "hash of the task definition",
    "schedule_hash": "hash of the realized fault schedule definition",
    "config_hash": "hash of the resolved experiment config",
    "lock_hash": "hash of the evidence-freeze lock the run was made under (null if the config is not frozen)",
    "code_version": "package version + git sha (+ .dirty) of the code that made the run",
    "session": "runner session (1 = first run into this directory, 2 = first resume, ...)",
}


def write_parquet(rows: Iterable[dict[str, Any]], path: Path) -> None:
    """Write rows with the documented column order, atomically (temp file + os.replace)."""
    import pandas as pd

    frame = pd.DataFrame(list(rows), columns=list(COLUMNS))
    frame["catalog_size"] = frame["catalog_size"].astype("Int64")
    tmp = path.with_suffix(".parquet.tmp")
    frame.to_parquet(tmp, index=False)
    with open(tmp, "rb") as fh:
        os.fsync(fh.fileno())
    os.replace(tmp, path)
