"""Tool programs as a model writes them (ToolPro): from the task's plan as the model understood it and the tools
it is shown, never from the task's reference program. Used by the offline model's `programmer` and `broken`
policies; `broken` first writes one of four faulty programs, so validation, sandbox diagnostics, repair, replay
and the stepwise fallback are all exercised end to end."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any

from aft_bench.agents.program import CHECK, program_result
from aft_bench.interface.interface import KEY_PARAM
from aft_bench.tasks.task import PlanStep

# what the `broken` policy gets wrong in its first program, chosen per task (every kind appears in a workload):
# a tool the surface does not have and a write labelled READ (both refused by validation before anything runs),
# a type error after the first write (it fails at run time: the repair re-executes the completed write), a
# runaway loop after the last call (it doubles a list until the sandbox's memory limit stops it), and the type
# error followed by a repair that changes the completed write's arguments (replay then refuses the program, and
# the model makes the remaining calls stepwise)
BROKEN_KINDS = ("undeclared_tool", "wrong_effect", "type_error", "runaway_loop", "changed_write")
FIRST_PROGRAM = {"changed_write": "type_error"}  # the first program's mistake when it is not the kind's own
REFUSED_BY_DESIGN = frozenset({"undeclared_tool", "wrong_effect"})  # mistakes validation is meant to refuse


def broken_kind(task_id: str) -> str:
    """The mistake the `broken` policy makes on this task (stable: from the task id's hash)."""
    return BROKEN_KINDS[int(hashlib.sha256(task_id.encode()).hexdigest(), 16) % len(BROKEN_KINDS)]


def plan_calls(plan: Sequence[PlanStep]) -> list[tuple[int, PlanStep]]:
    """The plan's steps that call a tool, with their index in the plan."""
    return [(i, s) for i, s in enumerate(plan) if s.call is not None]


def written_program(task_id: str, plan: Sequence[PlanStep], keyed: Sequence[str], mistake: str | None = None) -> str:
    """One straight-line program: each call of the plan as `CALL(tool, arguments, effect)` (READ for read-only
    steps), a write's result checked, an idempotency key where the tool (`keyed`) takes one; with `mistake`, the
    broken program of that kind."""
    lines, writes = [CHECK], 0
    for i, step in plan_calls(plan):
        assert step.call is not None
        args = dict(step.args)
        if step.call in keyed:
            args[KEY_PARAM] = f"{task_id}:{i}"
        tool, effect = step.call, "READ" if step.read else "WRITE"
        if mistake == "changed_write" and writes == 0 and effect == "WRITE" and "note" in args:
            args["note"] = f"{args['note']} (repaired)"  # the repair rewrites the write it already made
        if mistake == "undeclared_tool" and writes == 0 and effect == "WRITE":
            tool = f"{step.call}_now"  # a plausible name the surface does not have
        if mistake == "wrong_effect" and writes == 0 and effect == "WRITE":
            effect = "READ"
        lines.append(f"r{i} = CALL({json.dumps(tool)}, {args!r}, {json.dumps(effect)})")
        if not step.read:  # a write whose result is not a success stops the program (then: a repair)
            lines.append(f'check(r{i}, "{step.call}")')
            writes += 1
            if mistake == "type_error" and writes == 1:
                lines.append(f'total = r{i}["status"] + 1')  # a string plus a number: TypeError
    if mistake == "runaway_loop":
        lines += ["seen = [1]", "while len(seen) > 0:", "    seen = seen + seen"]
    lines.append('"done"')
    return "\n".join(lines)


def mistake_of(kind: str | None, submission: int) -> str | None:
    """The mistake in the `broken` policy's `submission`-th program (0: the first) on a task of this kind."""
    if kind is None:
        return None
    if submission == 0:
        return FIRST_PROGRAM.get(kind, kind)
    return kind if kind == "changed_write" else None  # its repair changes the completed write; others are fixed


def completed_before_failure(plan: Sequence[PlanStep], kind: str | None) -> int:
    """How many of the plan's calls the model's failed first program had completed, as its author knows from
    where its mistake was: through the first write for a type error, none when validation refused it."""
    if kind not in ("type_error", "changed_write"):
        return 0
    calls = plan_calls(plan)
    first_write = next((n for n, (_, s) in enumerate(calls) if not s.read), len(calls) - 1)
    return first_write + 1


def completed_calls(result: Any) -> int:
    """How many of a straight-line program's calls completed, from a structured result's `calls_made` (a
    replayed write counts; the last call does not when it is the write whose check failed); 0 for a text
    result, which does not say."""
    if not isinstance(result, dict):
        return 0
    made = result.get("calls_made") or []
    return max(0, len(made) - (1 if "did not succeed" in str(result.get("detail", "")) else 0))


def program_status(seen: Any) -> tuple[str, str]:
    """(status, detail) of a run_program result as the model reads it, structured or text: "ok", "error_run"
    (the program ran and failed: an attempt spent) or "error_refused" (validation or the interface refused it)."""
    status, error, detail = program_result(seen)
    if status == "ok":
        return "ok", ""
    return ("error_run" if error == "program_failed" else "error_refused"), detail
