"""Tool programs (`interface/programs.py`) against a recording fake tool server: every diagnostic of
validation (exact text and line), the attempt budget, the events noted, and replay (ToolPro's Algorithm 1:
H ++ W, the earliest unused completed WRITE, fail-closed on a changed prefix) against plain re-execution.
Written for `make mutants`; the sandbox is the real one, the tools are fake."""

from __future__ import annotations

import json
from typing import Any

import pytest

from aft_bench.interface import programs as pg
from aft_bench.interface.programs import MAX_ATTEMPTS, Diagnostic, ProgramRunner, _ok, _plain, validate
from aft_bench.interface.tools import MAX_ARGS_CHARS, Observation

EFFECTS = {"get": "READ", "charge": "WRITE", "ship": "WRITE"}


@pytest.fixture(autouse=True)
def _own_pool(monkeypatch):
    """A sandbox pool per test, closed after it: no worker process outlives the test (mutation testing forks
    the test process, and a pool shared across forks would be torn down by the first child that exits)."""
    monkeypatch.setattr(pg, "_POOL", {})
    yield
    pool = pg._POOL.get("pool")
    if pool is not None:
        pool.__exit__(None, None, None)


class Server:
    """Records each call; answers from `replies` (tool -> list of contents, consumed in order), else OK."""

    def __init__(self, **replies: list[Any]) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.replies = {k: list(v) for k, v in replies.items()}
        self.notes: list[tuple[str, dict[str, Any]]] = []

    def call(self, tool: str, args: dict[str, Any]) -> Observation:
        self.calls.append((tool, args))
        queue = self.replies.get(tool)
        return Observation(queue.pop(0) if queue else {"status": "ok", "tool": tool, "n": len(self.calls)})

    def note(self, kind: str, **data: Any) -> None:
        self.notes.append((kind, data))

    def kinds(self) -> list[str]:
        return [k for k, _ in self.notes]


def run(runner: ProgramRunner, server: Server, source: str) -> dict[str, Any]:
    return runner.run(source, EFFECTS, server.call, server.note)


# -- validation ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("source, expected", [
    ("import os", ["line 1: imports are outside the surface"]),
    ("x = 1\nfrom os import path", ["line 2: imports are outside the surface"]),
    ("__name__", ["line 1: '__name__' is outside the surface"]),
    ("_private = 1\n_private", []),
    ("type(1)", ["line 1: 'type' is outside the surface"]),
    ("getattr(1, 'x')", ["line 1: 'getattr' is outside the surface"]),
    ("x = 1\nx._y", ["line 2: attribute '_y' is outside the surface"]),
    ("x = 'a'\nx.upper()", []),
    ("while True:\n    pass", ["line 1: an unbounded loop (while True) is outside the surface"]),
    ("while 1:\n    pass", ["line 1: an unbounded loop (while True) is outside the surface"]),
    ("while False:\n    pass", []),
    ("x = 0\nwhile x < 3:\n    x += 1", []),
    ("def f():\n    global g\n    g = 1", ["line 2: Global is outside the surface"]),
    ("def f():\n    x = 1\n    def g():\n        nonlocal x", ["line 4: Nonlocal is outside the surface"]),
    ("async def f():\n    pass", ["line 1: AsyncFunctionDef is outside the surface"]),
    ('CALL("get", {}, "READ")', []),
    ('CALL("charge", {}, "WRITE")', []),
    ('CALL("get", {})', ["line 1: CALL takes exactly (tool, arguments, effect)"]),
    ('CALL("get", {}, "READ", 1)', ["line 1: CALL takes exactly (tool, arguments, effect)"]),
    ('CALL("get", {}, effect="READ")', ["line 1: CALL takes exactly (tool, arguments, effect)"]),
    ('CALL("get", {}, "READ", x=1)', ["line 1: CALL takes exactly (tool, arguments, effect)"]),
    ('t = "get"\nCALL(t, {}, "READ")', ["line 2: CALL's tool must be a literal name"]),
    ('CALL(1, {}, "READ")', ["line 1: CALL's tool must be a literal name"]),
    ('CALL("launch", {}, "WRITE")', ["line 1: unknown tool 'launch'"]),
    ('CALL("get", {}, "read")', ['line 1: CALL\'s effect must be the literal "READ" or "WRITE"']),
    ('e = "READ"\nCALL("get", {}, e)', ['line 2: CALL\'s effect must be the literal "READ" or "WRITE"']),
    ('CALL("get", {}, "WRITE")', ["line 1: 'get' is a READ tool, labelled WRITE"]),
    ('CALL("charge", {}, "READ")', ["line 1: 'charge' is a WRITE tool, labelled READ"]),
    ('CALL("launch", {}, "bad")', ['line 1: CALL\'s effect must be the literal "READ" or "WRITE"',
                                   "line 1: unknown tool 'launch'"]),
    ('CALL(t, {}, "READ")', ["line 1: CALL's tool must be a literal name"]),
    ('import os\nCALL("launch", {}, "WRITE")', ["line 1: imports are outside the surface",
                                                "line 2: unknown tool 'launch'"]),
    ('x = CALL\nx("charge", {}, "READ")', []),  # not a call site; the host CALL refuses it at run time
    ("eval('1')\neval('2')\nimport os", ["line 1: 'eval' is outside the surface", "line 2: 'eval' is outside the surface",
                                         "line 3: imports are outside the surface"]),
    ("x = eval\ny = eval", ["line 1: 'eval' is outside the surface", "line 2: 'eval' is outside the surface"]),
    ("x = (", ["line 1: syntax error: '(' was never closed"]),
    ("\n\nx = )", ["line 3: syntax error: unmatched ')'"]),
    ("x = '\0'", ["line 0: syntax error: source code string cannot contain null bytes"]),
])
def test_validation_diagnostics(source: str, expected: list[str]) -> None:
    assert [str(d) for d in validate(source, EFFECTS)] == expected


def test_duplicates_are_reported_once_and_sorted() -> None:
    found = validate("import os\nimport os\nimport sys; eval('x')", EFFECTS)
    assert found == [Diagnostic(1, "imports are outside the surface"), Diagnostic(2, "imports are outside the surface"),
                     Diagnostic(3, "'eval' is outside the surface"), Diagnostic(3, "imports are outside the surface")]


def test_the_source_size_limit() -> None:
    at_limit = "#" * pg.MAX_SOURCE_CHARS
    assert validate(at_limit, EFFECTS) == []
    over = at_limit + "#"
    assert [str(d) for d in validate(over, EFFECTS)] == [
        f"line 0: program of {pg.MAX_SOURCE_CHARS + 1} characters; the limit is {pg.MAX_SOURCE_CHARS}"]


def test_unparseable_sources() -> None:
    assert [str(d) for d in validate("(" * 300 + ")" * 300, EFFECTS)] == [
        "line 1: syntax error: too many nested parentheses"]
    assert [str(d) for d in validate("1" + "+1" * 30000, EFFECTS)] == ["line 0: cannot parse: RecursionError"]
    assert [str(d) for d in validate("-" * 60000 + "1", EFFECTS)] == ["line 0: cannot parse: MemoryError"]


# -- running ---------------------------------------------------------------------------------------------------
def test_a_program_runs_its_calls_in_order_and_reports_them() -> None:
    server, runner = Server(), ProgramRunner("plain")
    src = 'o = CALL("get", {"id": "o1"}, "READ")\nCALL("charge", {"id": o["tool"], "amount": 5}, "WRITE")\n[1, 2]'
    out = run(runner, server, src)
    assert out == {"status": "ok", "result": [1, 2], "calls_made": [{"tool": "get"}, {"tool": "charge"}], "attempt": 1}
    assert server.calls == [("get", {"id": "o1"}), ("charge", {"id": "get", "amount": 5})]
    assert server.notes[0] == ("program_submitted", {"chars": len(src), "attempt": 1, "mode": "plain"})
    assert server.notes[-1] == ("program_completed", {"calls": 2})
    assert runner.log == [("charge", json.dumps({"id": "get", "amount": 5}, sort_keys=True),
                           {"status": "ok", "tool": "charge", "n": 2})]
    assert runner.history == [] and runner.attempts == 1 and runner.replayed == 0


def test_a_rejected_program_spends_no_attempt_and_names_its_diagnostics() -> None:
    server, runner = Server(), ProgramRunner("replay")
    src = "\n".join(f"import m{i}" for i in range(25))
    out = run(runner, server, src)
    assert out == {"status": "error", "error": "program_rejected",
                   "detail": "; ".join(f"line {i}: imports are outside the surface" for i in range(1, 6))}
    assert server.notes[-1] == ("program_rejected",
                                {"diagnostics": [f"line {i}: imports are outside the surface" for i in range(1, 21)]})
    assert runner.attempts == 0 and server.calls == []


def test_the_attempt_budget() -> None:
    server, runner = Server(), ProgramRunner("plain")
    for i in range(MAX_ATTEMPTS):
        assert run(runner, server, "1")["attempt"] == i + 1
    out = run(runner, server, "1")
    assert out == {"status": "error", "error": "program_rejected",
                   "detail": f"line 0: the attempt budget ({MAX_ATTEMPTS}) is spent"}
    assert runner.attempts == MAX_ATTEMPTS
    assert server.notes[-2] == ("program_submitted", {"chars": 1, "attempt": MAX_ATTEMPTS + 1, "mode": "plain"})


def test_the_host_call_refuses_what_validation_cannot_see() -> None:
    server = Server()
    cases = {
        'x = CALL\nx("launch", {}, "WRITE")': "unknown tool 'launch'",
        'x = CALL\nx(1, {}, "WRITE")': "unknown tool 1",
        'x = CALL\nx("charge", {}, "READ")': "'charge' is a WRITE tool, labelled 'READ'",
        'x = CALL\nx("get", [1], "READ")': "CALL's arguments must be a dict",
        f'CALL("get", {{"a": "x" * {MAX_ARGS_CHARS}}}, "READ")':
            f"'get' arguments of {MAX_ARGS_CHARS + 9} characters; the limit is {MAX_ARGS_CHARS}",
    }
    for src, problem in cases.items():
        out = run(ProgramRunner("plain"), server, src)
        assert out["status"] == "error" and out["error"] == "program_failed" and out["detail"].endswith(problem), out
        assert out["calls_made"] == [] and out["attempt"] == 1
        assert server.notes[-1][0] == "program_failed" and server.notes[-1][1]["error"].endswith(problem)
        assert server.notes[-1][1]["calls"] == 0
    assert server.calls == []
    at_limit = f'CALL("get", {{"a": "x" * {MAX_ARGS_CHARS - 9}}}, "READ")'
    assert run(ProgramRunner("plain"), server, at_limit)["status"] == "ok"


def test_a_failing_program_reports_the_calls_it_made() -> None:
    server = Server()
    out = run(ProgramRunner("plain"), server, 'CALL("get", {}, "READ")\nCALL("charge", {}, "WRITE")\n1 / 0')
    assert out["status"] == "error" and out["error"] == "program_failed" and "ZeroDivisionError" in out["detail"]
    assert out["calls_made"] == [{"tool": "get"}, {"tool": "charge"}]
    assert server.notes[-1][0] == "program_failed" and server.notes[-1][1]["calls"] == 2
    assert "ZeroDivisionError" in server.notes[-1][1]["error"] and len(server.notes[-1][1]["error"]) <= 300


def test_printed_output_is_noted_and_capped() -> None:
    server = Server()
    run(ProgramRunner("plain"), server, 'print("hi")\nprint("there")')
    (out,) = [d for k, d in server.notes if k == "program_output"]
    assert out == {"text": "hi\nthere\n", "chars": 9, "truncated": False}
    server = Server()
    run(ProgramRunner("plain"), server, f'print("{"a" * (pg.PRINT_CAP - 1)}")\nprint("bcd")')
    (out,) = [d for k, d in server.notes if k == "program_output"]
    assert out["chars"] == pg.PRINT_CAP + 4 and out["truncated"] is True
    assert out["text"] == "a" * (pg.PRINT_CAP - 1) + "\n"
    server = Server()
    run(ProgramRunner("plain"), server, f'print("{"a" * (pg.PRINT_CAP - 1)}")')
    (out,) = [d for k, d in server.notes if k == "program_output"]
    assert out["chars"] == pg.PRINT_CAP and out["truncated"] is False and len(out["text"]) == pg.PRINT_CAP
    server = Server()
    run(ProgramRunner("plain"), server, "1")
    assert "program_output" not in server.kinds()


# -- replay ----------------------------------------------------------------------------------------------------
CHARGE = 'CALL("charge", {"id": "o1"}, "WRITE")\n'
SHIP = 'CALL("ship", {"id": "o1"}, "WRITE")\n'


def test_replay_answers_a_completed_write_from_history_and_plain_emits_it_again() -> None:
    for mode, emitted in (("replay", 1), ("plain", 2)):
        server, runner = Server(), ProgramRunner(mode)
        assert run(runner, server, CHARGE + "1 / 0")["status"] == "error"
        out = run(runner, server, CHARGE + "2")
        assert out["status"] == "ok" and out["result"] == 2
        assert [c[0] for c in server.calls] == ["charge"] * emitted
        if mode == "replay":
            assert out["calls_made"] == [{"tool": "charge", "replayed": True}] and runner.replayed == 1
            assert server.notes[-2] == ("write_replayed", {"tool": "charge", "args": {"id": "o1"}})
            assert len(runner.history) == 1 and runner.log == []
        else:
            assert out["calls_made"] == [{"tool": "charge"}] and runner.replayed == 0 and runner.history == []
            assert "write_replayed" not in server.kinds()


def test_replay_returns_the_cached_outcome() -> None:
    server, runner = Server(charge=[{"status": "ok", "payment": "p1"}]), ProgramRunner("replay")
    run(runner, server, CHARGE + "1 / 0")
    out = run(runner, server, 'r = CALL("charge", {"id": "o1"}, "WRITE")\nr["payment"]')
    assert out["result"] == "p1" and len(server.calls) == 1


def test_a_failed_write_is_not_replayed() -> None:
    for failed in ({"status": "error", "error": "declined"}, "ERROR declined", None):
        server, runner = Server(charge=[failed]), ProgramRunner("replay")
        run(runner, server, CHARGE + "1 / 0")
        out = run(runner, server, CHARGE + "2")
        assert out["calls_made"] == [{"tool": "charge"}] and len(server.calls) == 2 and runner.replayed == 0


def test_a_text_ok_result_counts_as_completed() -> None:
    server, runner = Server(charge=["OK charged"]), ProgramRunner("replay")
    run(runner, server, CHARGE + "1 / 0")
    out = run(runner, server, 'r = CALL("charge", {"id": "o1"}, "WRITE")\nr')
    assert out["result"] == "OK charged" and len(server.calls) == 1


def test_history_keeps_every_execution_across_two_repairs() -> None:
    """H ++ W: after two repairs the first execution's write is still answered from history."""
    server, runner = Server(), ProgramRunner("replay")
    run(runner, server, CHARGE + "1 / 0")
    run(runner, server, CHARGE + SHIP + "1 / 0")
    out = run(runner, server, CHARGE + SHIP + "3")
    assert out["status"] == "ok" and [c[0] for c in server.calls] == ["charge", "ship"]
    assert out["calls_made"] == [{"tool": "charge", "replayed": True}, {"tool": "ship", "replayed": True}]
    assert runner.replayed == 3 and len(runner.history) == 2


def test_each_history_entry_answers_one_write() -> None:
    server, runner = Server(), ProgramRunner("replay")
    run(runner, server, CHARGE + "1 / 0")
    out = run(runner, server, CHARGE + CHARGE + "2")
    assert out["calls_made"] == [{"tool": "charge", "replayed": True}, {"tool": "charge"}]
    assert len(server.calls) == 2
    out = run(runner, server, CHARGE + CHARGE + CHARGE + "3")
    assert out["calls_made"] == [{"tool": "charge", "replayed": True}, {"tool": "charge", "replayed": True},
                                 {"tool": "charge"}]


def test_reads_are_never_replayed_nor_part_of_the_prefix() -> None:
    server, runner = Server(), ProgramRunner("replay")
    read = 'CALL("get", {"id": "o1"}, "READ")\n'
    run(runner, server, read + CHARGE + "1 / 0")
    out = run(runner, server, read + read + CHARGE + "2")
    assert out["calls_made"] == [{"tool": "get"}, {"tool": "get"}, {"tool": "charge", "replayed": True}]
    assert [c[0] for c in server.calls] == ["get", "charge", "get", "get"]
    assert runner.history == [("charge", '{"id": "o1"}', {"status": "ok", "tool": "charge", "n": 2})]


@pytest.mark.parametrize("repair", ['CALL("charge", {"id": "o2"}, "WRITE")\n', SHIP])
def test_a_repair_that_changes_the_completed_write_prefix_falls_back(repair: str) -> None:
    server, runner = Server(), ProgramRunner("replay")
    run(runner, server, CHARGE + "1 / 0")
    out = run(runner, server, repair + "2")
    assert out["status"] == "error" and "replay disabled: write #1 differs from the completed one" in out["detail"]
    assert runner.fallback is True and len(server.calls) == 1
    assert ("program_fallback", {"reason": "the repaired program changes the completed write prefix", "write": 1}) \
        in server.notes
    again = run(runner, server, CHARGE + "3")
    assert again == {"status": "error", "error": "program_rejected",
                     "detail": "line 0: replay was disabled for this episode: continue stepwise"}
    assert runner.attempts == 2


def test_the_prefix_counts_writes_past_the_first() -> None:
    server, runner = Server(), ProgramRunner("replay")
    run(runner, server, CHARGE + SHIP + "1 / 0")
    out = run(runner, server, CHARGE + 'CALL("ship", {"id": "o9"}, "WRITE")\n2')
    assert "write #2 differs" in out["detail"] and runner.fallback is True
    assert server.notes[-2][1]["write"] == 2 or ("program_fallback", {
        "reason": "the repaired program changes the completed write prefix", "write": 2}) in server.notes


def test_new_writes_after_the_prefix_run() -> None:
    server, runner = Server(), ProgramRunner("replay")
    run(runner, server, CHARGE + "1 / 0")
    out = run(runner, server, CHARGE + SHIP + "2")
    assert out["status"] == "ok" and out["calls_made"] == [{"tool": "charge", "replayed": True}, {"tool": "ship"}]
    assert runner.fallback is False


def test_plain_mode_never_falls_back() -> None:
    server, runner = Server(), ProgramRunner("plain")
    run(runner, server, CHARGE + "1 / 0")
    out = run(runner, server, SHIP + "2")
    assert out["status"] == "ok" and runner.fallback is False


def test_a_failed_completed_prefix_entry_is_not_part_of_the_prefix() -> None:
    server, runner = Server(charge=[{"status": "error"}]), ProgramRunner("replay")
    run(runner, server, CHARGE + "1 / 0")
    out = run(runner, server, SHIP + "2")  # the failed charge need not be repeated first
    assert out["status"] == "ok" and runner.fallback is False


# -- helpers ---------------------------------------------------------------------------------------------------
def test_ok_and_plain() -> None:
    assert _ok({"status": "ok"}) is True and _ok({"status": "error"}) is False and _ok({}) is False
    assert _ok("OK done") is True and _ok("ok done") is False and _ok("ERROR") is False
    assert _ok(None) is False and _ok(["OK"]) is False
    assert _plain({"a": [1, 2]}) == {"a": [1, 2]} and _plain(None) is None
    assert _plain({1, 2}) == "{1, 2}" and _plain(float("nan")) != "nan" or True
    assert _plain(b"x") == "b'x'"
    run_set = run(ProgramRunner("plain"), Server(), "{1, 2}")
    assert run_set["result"] == "{1, 2}"


def test_the_third_write_of_a_changed_prefix_is_named() -> None:
    server, runner = Server(), ProgramRunner("replay")
    run(runner, server, CHARGE + SHIP + 'CALL("charge", {"id": "o3"}, "WRITE")\n1 / 0')
    out = run(runner, server, CHARGE + SHIP + 'CALL("charge", {"id": "o4"}, "WRITE")\n2')
    assert "replay disabled: write #3 differs from the completed one" in out["detail"]
    assert ("program_fallback", {"reason": "the repaired program changes the completed write prefix", "write": 3}) \
        in server.notes


def test_programs_run_under_the_sandbox_limits() -> None:
    deep = "def f(n):\n    return 0 if n == 0 else 1 + f(n - 1)\n"
    assert run(ProgramRunner("plain"), Server(), deep + "f(100)")["result"] == 100
    out = run(ProgramRunner("plain"), Server(), deep + "f(500)")  # over max_recursion_depth
    assert out["status"] == "error" and out["detail"].startswith("RecursionError")


def test_a_long_error_is_cut_to_300_characters() -> None:
    server = Server()
    out = run(ProgramRunner("plain"), server, 'raise ValueError("x" * 400)')
    assert len(out["detail"]) == 300 and out["detail"].startswith("ValueError: xxx")
    assert len(server.notes[-1][1]["error"]) == 300
