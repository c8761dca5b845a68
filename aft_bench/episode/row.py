"""The result row: every column declared once (name, type, group, meaning) and used by the runner, the parquet
writer, the audit and the README's column table (a test keeps the README equal to this table)."""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Literal

from aft_bench.common.canonical import canonical_json
from aft_bench.episode.episode import EpisodeResult
from aft_bench.judge.labels import Labels

Group = Literal["key", "label", "usage", "provenance"]


@dataclass(frozen=True)
class Column:
    name: str
    type: str  # str | int | float | bool | json, with `?` when the value may be null
    group: Group
    meaning: str


_COLUMNS = (
    Column("run_id", "str", "key", "hash of the run tuple (the key fields below)"),
    Column("world", "str", "key", "world id (`catalog` for generated discovery catalogs)"),
    Column("backend", "str", "key", "backend implementation (`memory` or `sqlite`)"),
    Column("workload", "str", "key", "workload id"),
    Column("task_id", "str", "key", "task id (the task cluster of the statistics)"),
    Column("condition", "str", "key", "interface condition name (I0..I5, I5-<mechanism>)"),
    Column("fault", "str", "key", "fault variant of the workload (`none` if no fault)"),
    Column("fault_seed", "int", "key", "seed from which the fault realization (and catalog) is drawn"),
    Column("catalog_size", "int?", "key", "number of tools in the discovery catalog (null elsewhere)"),
    Column("agent", "str", "key", "agent kind from the registry (`deterministic`, ...)"),
    Column("agent_spec", "json", "key",
           "the agent's name and every parameter, canonical JSON (an API key only by its variable name)"),
    Column("model", "str", "key", "model identifier (`none` for agents without a model)"),
    Column("rep", "int", "key", "repetition index"),
    Column("mechanisms", "json", "key", "resolved mechanism settings of the condition, as JSON"),
    Column("fault_fired", "bool?", "label", "every planned fault fired (null when none was planned)"),
    Column("outcome", "str", "label", "outcome class"),
    Column("y_goal", "bool", "label", "requested postcondition holds in the terminal state"),
    Column("y_correct", "bool", "label", "policy acceptance and trace safety both hold"),
    Column("recovered", "bool?", "label",
           "every interrupted invocation was continued with its work kept (null without interruption)"),
    Column("duplicate_effects", "int", "label", "commits re-realizing an already realized logical effect"),
    Column("unsafe_commits", "int", "label", "commits that were duplicate, unauthorized, stale or unintended"),
    Column("unauthorized_effects", "int", "label", "commits by a principal lacking the permission at the commit point"),
    Column("stale_writes", "int", "label", "commits over a change the agent had not seen"),
    Column("unintended_effects", "int", "label", "commits outside what the task asked or its policy allowed"),
    Column("residual_effects", "int", "label", "uncompensated effects left behind when the goal does not hold"),
    Column("terminal_action", "str", "label", "finish | abort | refuse | escalate | budget_exhausted | none"),
    Column("terminal_claim", "str?", "label", "success | failure | unknown (null without a terminal decision)"),
    Column("claim_correct", "bool?", "label", "the terminal claim matches the terminal state (null without a claim)"),
    Column("incorrect_claim", "int", "label",
           "1 unless the terminal claim was correct: false success, false failure, other incorrect, or no claim"),
    Column("context_tokens", "int", "label",
           "tokens of tool text shown to the agent (surface, search cards, loaded schemas)"),
    Column("recall", "float", "label", "share of the task's required capabilities that were shown to the agent"),
    Column("tool_calls", "int", "label", "calls that reached the pipeline (invocations, resumes, status, verification)"),
    Column("model_turns", "int", "label", "agent decisions (one per action)"),
    Column("mode", "str", "label", "step | program | fallback: how the episode used tool programs"),
    Column("program_attempts", "int", "label", "tool programs that ran (accepted by validation)"),
    Column("replayed_writes", "int", "label", "writes answered from the replay history instead of emitted again"),
    Column("fallbacks", "int", "label", "times replay was disabled and the episode continued stepwise"),
    Column("round_trips", "int", "usage", "agent-to-tool-server calls (a program's inner calls run server-side)"),
    Column("traffic_bytes", "int", "usage",
           "client traffic: bytes between agent and tool server (schemas shown, arguments, results) plus model_bytes"),
    Column("model_bytes", "int", "usage",
           "bytes between agent and model (requests and replies); without a model, the schemas shown per decision"),
    Column("virtual_latency_s", "float?", "usage",
           "ToolPro's virtual clock under the experiment's network profile: decisions x DEC + round trips x RTT + "
           "programs x BUILD (null without a profile)"),
    Column("model_calls", "int", "usage", "model calls the agent made (0 for agents without a model)"),
    Column("prompt_tokens", "int", "usage", "prompt tokens the provider reported, summed over the episode"),
    Column("completion_tokens", "int", "usage", "completion tokens the provider reported, summed over the episode"),
    Column("cost_usd", "float?", "usage",
           "cost of the model calls in US dollars as litellm prices them (0 without a model, null when unknown)"),
    Column("retries", "int", "usage", "provider calls repeated after a rate limit, timeout or server error"),
    Column("invalid_tool_calls", "int", "usage", "malformed model actions (bad JSON, unknown tool, invalid arguments)"),
    Column("latency_s", "float", "usage", "seconds spent waiting for the model provider (0 without a model)"),
    Column("wall_s", "float", "provenance", "wall-clock seconds of the run (monotonic clock; not part of any label)"),
    Column("trace_head", "str", "provenance", "hash of the sealed trace's last event"),
    Column("world_hash", "str", "provenance", "hash of the world manifest"),
    Column("task_hash", "str", "provenance", "hash of the task definition"),
    Column("schedule_hash", "str", "provenance", "hash of the realized fault schedule definition"),
    Column("config_hash", "str", "provenance", "hash of the resolved experiment config"),
    Column("lock_hash", "str?", "provenance",
           "hash of the evidence-freeze lock the run was made under (null if the config is not frozen)"),
    Column("code_version", "str", "provenance", "package version + git sha (+ .dirty) of the code that made the run"),
    Column("session", "int", "provenance", "runner session (1 = first run into this directory, 2 = first resume, ...)"),
    Column("client", "str?", "provenance",
           "the MCP client's name/version from its handshake (served episodes; null for every other agent)"),
    Column("retry_wait_s", "float?", "usage",
           "seconds waited before provider retries, as the provider asked (Retry-After) or by backoff (null in "
           "results made before it was recorded)"),
    Column("cassette", "str?", "provenance",
           "hash of the cassette whose recorded answers the model calls were replayed from (null: a live model)"),
    Column("network", "json?", "key",
           "the run's network profile (rtt_ms, decision_ms, build_ms) when the config sweeps networks (null otherwise)"),
    Column("policy_start", "str?", "label",
           "cold | warm: how ToolPro's profile-driven policy started (program agent, mode = \"profile\"; null otherwise)"),
    Column("policy_step_ms", "float?", "label",
           "the RTT + DEC per stepwise call the policy decided with (measured on a cold start, the profile's warm)"),
    Column("policy_build_ms", "float?", "label",
           "the BUILD the policy decided with (its prior on a cold start, the profile's on a warm one)"),
    Column("measured_build_ms", "float?", "label",
           "the BUILD the policy measured on the virtual clock when a program ran (mean over its programs)"),
    Column("server", "str?", "provenance",
           "the real MCP server an external world ran: its package and pinned version (null for built-in worlds)"),
)

SCHEMA: dict[str, Column] = {c.name: c for c in _COLUMNS}
COLUMNS: dict[str, str] = {c.name: c.meaning for c in _COLUMNS}
# Columns added after results existed: a journal row or table without one reads it as this value.
LATE_COLUMNS: dict[str, Any] = {"client": None, "retry_wait_s": None, "cassette": None, "network": None,
                               "policy_start": None, "policy_step_ms": None, "policy_build_ms": None,
                               "measured_build_ms": None, "server": None}
INT64 = (-(2**63), 2**63 - 1)  # what parquet (and pandas) can hold in an integer column


def with_late_columns(row: dict[str, Any]) -> dict[str, Any]:
    """`row` with any column added since it was written, at its stated value."""
    missing = {k: v for k, v in LATE_COLUMNS.items() if k not in row}
    return {**row, **missing} if missing else row


def _value_problem(col: Column, value: Any) -> str | None:
    base, nullable = col.type.rstrip("?"), col.type.endswith("?")
    if value is None:
        return None if nullable else "null where a value is required"
    if base == "bool":
        return None if isinstance(value, bool) else f"{value!r} is not true or false"
    if base == "int":
        if not isinstance(value, int) or isinstance(value, bool):
            return f"{value!r} is not an integer"
        return None if INT64[0] <= value <= INT64[1] else f"{value} does not fit in 64 bits"
    if base == "float":
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            return f"{value!r} is not a number"
        return None if math.isfinite(value) and abs(value) < 1e300 else f"{value!r} is not a finite number"
    return None if isinstance(value, str) else f"{value!r} is not a string"  # str and json (canonical text)


# Values `_value_problem` certainly accepts, by exact type (the journal checks every row in the one process that
# records them all): anything else, subclasses included, is judged by `_value_problem` itself.
_ACCEPTS: dict[str, Callable[[Any], bool]] = {
    "bool": lambda v: v.__class__ is bool,
    "int": lambda v: v.__class__ is int and INT64[0] <= v <= INT64[1],
    "float": lambda v: v.__class__ is float and -1e300 < v < 1e300,  # false for NaN and the infinities
    "str": lambda v: v.__class__ is str,
    "json": lambda v: v.__class__ is str,
}
_PLAN = tuple((name, col, _ACCEPTS[col.type.rstrip("?")], col.type.endswith("?")) for name, col in SCHEMA.items())


def row_problems(row: dict[str, Any]) -> list[str]:
    """How a row departs from the row model (missing or extra columns, a value of the wrong type, an integer
    beyond 64 bits, a non-finite number), each naming the column; [] for a row that can be recorded."""
    out: list[str] = []
    if row.keys() != SCHEMA.keys():
        out += [f"column '{c}' is missing" for c in SCHEMA if c not in row]
        out += [f"'{c}' is not a column of the row model" for c in row if c not in SCHEMA]
    for name, col, accepts, nullable in _PLAN:
        if name not in row:
            continue
        value = row[name]
        if (value is None and nullable) or accepts(value):
            continue
        if (problem := _value_problem(col, value)) is not None:
            out.append(f"column '{name}': {problem}")
    return out


def label_columns(lb: Labels) -> dict[str, Any]:
    """The row's columns that the judge computes from the trace and terminal state (the audit recomputes them)."""
    return {
        "fault_fired": lb.fault_fired,
        "outcome": lb.outcome,
        "y_goal": lb.y_goal,
        "y_correct": lb.y_correct,
        "recovered": lb.recovered,
        "duplicate_effects": lb.duplicate_effects,
        "unsafe_commits": lb.unsafe_commits,
        "unauthorized_effects": lb.unauthorized_effects,
        "stale_writes": lb.stale_writes,
        "unintended_effects": lb.unintended_effects,
        "residual_effects": lb.residual_effects,
        "terminal_action": lb.terminal_action,
        "terminal_claim": lb.terminal_claim,
        "claim_correct": lb.claim_correct,
        "incorrect_claim": int(lb.incorrect_claim),
        "context_tokens": lb.context_tokens,
        "recall": lb.capability_recall,
        "tool_calls": lb.tool_calls,
        "mode": lb.mode,
        "program_attempts": lb.program_attempts,
        "replayed_writes": lb.replayed_writes,
        "fallbacks": lb.fallbacks,
        "policy_start": lb.policy_start,
        "policy_step_ms": lb.policy_step_ms,
        "policy_build_ms": lb.policy_build_ms,
        "measured_build_ms": lb.measured_build_ms,
    }


def virtual_clock_s(decisions: Any, round_trips: Any, programs: Any, rtt_ms: float, decision_ms: float,
                    build_ms: float) -> Any:
    """ToolPro's virtual clock in seconds: decisions x DEC + round trips x RTT + programs x BUILD (numbers or
    whole columns alike)."""
    return (decisions * decision_ms + round_trips * rtt_ms + programs * build_ms) / 1000.0


def episode_row(key: Mapping[str, Any], run_id: str, mechanisms: Mapping[str, Any], result: EpisodeResult,
                wall_s: float, hashes: Mapping[str, str], network: Mapping[str, float] | None = None
                ) -> dict[str, Any]:
    """The row of one episode, before the batch layer adds the session columns. `network` (rtt_ms,
    decision_ms, build_ms) puts the episode on ToolPro's virtual clock."""
    played = result.played
    u = played.usage
    virtual = None
    if played.clock_ms is not None:  # the live clock (with jitter, its draws; without, the count formula below)
        virtual = round(played.clock_ms / 1000.0, 6)
    elif network is not None:
        virtual = round(virtual_clock_s(played.turns, played.tool_calls, result.labels.program_attempts,
                                        **{k: network[k] for k in ("rtt_ms", "decision_ms", "build_ms")}), 6)
    return {
        **key,
        "run_id": run_id,
        "mechanisms": canonical_json(dict(mechanisms)),
        **label_columns(result.labels),
        "model_turns": played.turns,
        "round_trips": played.tool_calls,
        "traffic_bytes": played.traffic_bytes + played.model_bytes,
        "model_bytes": played.model_bytes,
        "virtual_latency_s": virtual,
        "model_calls": u.model_calls,
        "prompt_tokens": u.prompt_tokens,
        "completion_tokens": u.completion_tokens,
        "cost_usd": u.cost_usd,
        "retries": u.retries,
        "invalid_tool_calls": u.invalid_tool_calls,
        "latency_s": round(u.latency_s, 6),
        "wall_s": round(wall_s, 6),
        "trace_head": result.trace_head,
        "server": None,  # a real server's package and version, from the hashes of an external world's cell
        **hashes,
        "client": None,
        "retry_wait_s": round(u.retry_wait_s, 6),
        "cassette": None,
        "network": key.get("network"),
    }


def write_parquet(rows: Iterable[dict[str, Any]], path: Path) -> None:
    """Write rows with the declared column order, atomically (temp file + os.replace)."""
    import pandas as pd

    frame = pd.DataFrame(list(rows), columns=list(SCHEMA))
    for c in _COLUMNS:
        if c.type == "int?":
            frame[c.name] = frame[c.name].astype("Int64")
    tmp = path.with_suffix(".parquet.tmp")
    frame.to_parquet(tmp, index=False)
    with open(tmp, "rb") as fh:
        os.fsync(fh.fileno())
    os.replace(tmp, path)
