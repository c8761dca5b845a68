"""The oracle trace: append-only API, hash chain, seal, tamper/truncation detection, determinism."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from aft_bench.common.errors import TraceIntegrityError
from aft_bench.episode.episode import run_scripted
from aft_bench.runtime.faults import FaultSchedule, FaultSpec, load_schedule
from aft_bench.runtime.trace import Trace, read_events, verify, verify_file

from conftest import WORLDS, steps, task_of


def _sample(path: Path) -> str:
    t = Trace(path)
    t.append("a", x=1)
    t.append("b", y=[1, 2], z={"k": "v"})
    t.append("c")
    return t.seal().hash


def test_api_is_append_and_read_only() -> None:
    public = {n for n in dir(Trace) if not n.startswith("_")}
    assert public == {"append", "append_canonical", "seal", "events", "of_kind", "head", "sealed"}  # appends only
    t = Trace()
    ev = t.append("a", x=[1])
    with pytest.raises(TypeError):
        ev.data["x"] = 2  # type: ignore[index]
    assert isinstance(t.events(), tuple)


def test_appended_data_is_detached_from_caller() -> None:
    t = Trace()
    payload = {"k": [1]}
    t.append("a", p=payload)
    payload["k"].append(2)
    assert t.events()[0].data["p"] == {"k": [1]}


def test_file_matches_memory_and_verifies(tmp_path: Path) -> None:
    p = tmp_path / "t.jsonl"
    head = _sample(p)
    events = read_events(p)
    assert [e.hash for e in events][-1] == head
    assert verify_file(p) == head
    assert verify_file(p, expected_head=head) == head
    assert [e.seq for e in events] == [0, 1, 2, 3]


def test_file_is_opened_in_append_mode(tmp_path: Path) -> None:
    p = tmp_path / "t.jsonl"
    p.write_text("previous content\n")
    t = Trace(p)
    t.append("a")
    assert p.read_text().startswith("previous content\n")


def test_sealed_trace_refuses_appends() -> None:
    t = Trace()
    t.seal()
    with pytest.raises(TraceIntegrityError):
        t.append("late")


def _lines(p: Path) -> list[str]:
    return p.read_text().splitlines()


@pytest.mark.parametrize(
    "tamper, message",
    [
        (lambda ls: [ls[0], ls[1].replace('"y":[1,2]', '"y":[1,3]'), *ls[2:]], "modified"),
        (lambda ls: [ls[0], *ls[2:]], "missing or reordered"),
        (lambda ls: [ls[1], ls[0], *ls[2:]], "missing or reordered"),
        (lambda ls: ls[:-1], "no seal"),
        (lambda ls: ls[:-2], "no seal"),
        (lambda ls: [*ls, ls[-1]], "missing or reordered"),
        (lambda ls: [ls[0], ls[1][:-5], *ls[2:]], "unreadable"),
    ],
    ids=["modified", "deleted", "reordered", "truncated-seal", "truncated-tail", "appended", "cut-line"],
)
def test_tampering_is_detected(tmp_path: Path, tamper, message: str) -> None:
    p = tmp_path / "t.jsonl"
    _sample(p)
    p.write_text("\n".join(tamper(_lines(p))) + "\n")
    with pytest.raises(TraceIntegrityError, match=message):
        verify_file(p)


def test_recomputed_hash_still_breaks_the_chain(tmp_path: Path) -> None:
    """Rewriting an event *and* its own hash is caught by the next event's prev link."""
    from aft_bench.common.canonical import canonical_json
    from aft_bench.runtime.trace import _event_hash

    p = tmp_path / "t.jsonl"
    _sample(p)
    ls = _lines(p)
    raw = json.loads(ls[1])
    raw["data"]["y"] = [9]
    raw["hash"] = _event_hash(raw["seq"], raw["kind"], raw["data"], raw["prev"])
    ls[1] = canonical_json(raw)  # the bytes a forger would write to pass the canonical-form check
    p.write_text("\n".join(ls) + "\n")
    with pytest.raises(TraceIntegrityError, match="does not chain"):
        verify_file(p)


def test_expected_head_mismatch_is_detected(tmp_path: Path) -> None:
    p = tmp_path / "t.jsonl"
    _sample(p)
    with pytest.raises(TraceIntegrityError, match="differs"):
        verify_file(p, expected_head="f" * 64)


def test_events_after_seal_are_detected() -> None:
    t = Trace()
    t.append("a")
    sealed = t.seal()
    forged = list(t.events()) + [sealed]
    with pytest.raises(TraceIntegrityError):
        verify(forged)


def _export_run(worlds, path: Path, seed: int):
    world, task = task_of(worlds, "exports/export-d3")
    sched = load_schedule(WORLDS / "exports" / "faults" / "transient_interruption.toml")
    script = steps({"call": "start_export", "args": {"dataset_id": "d3", "format": "csv"}},
                   {"resume": "last"}, {"end": "finish", "claim": "success"})
    return run_scripted(world, task, script, sched, seed, trace_path=path)


def test_same_seed_gives_byte_identical_trace(worlds, tmp_path: Path) -> None:
    a = _export_run(worlds, tmp_path / "a.jsonl", seed=11)
    b = _export_run(worlds, tmp_path / "b.jsonl", seed=11)
    assert (tmp_path / "a.jsonl").read_bytes() == (tmp_path / "b.jsonl").read_bytes()
    assert a.trace_head == b.trace_head
    runs = [_export_run(worlds, tmp_path / f"s{s}.jsonl", seed=s) for s in range(12)]
    assert len({r.trace_head for r in runs}) == 12  # the seed is recorded in the trace
    bodies = {tuple((e.kind, json.dumps(dict(e.data), sort_keys=True)) for e in r.events[1:-1]) for r in runs}
    assert len(bodies) == 3  # beyond the recorded seed, only the drawn interruption unit (1..3) differs


def test_run_trace_records_the_required_event_kinds(worlds, tmp_path: Path) -> None:
    world, task = task_of(worlds, "payments/charge-o1")
    sched = FaultSchedule(id="rl", faults=(FaultSpec(kind="response_loss", op="charge_payment"),))
    charge = {"call": "charge_payment", "args": {"order_id": "o1", "amount": 50, "note": ""}, "key": "k"}
    run = run_scripted(world, task, steps(charge, {"retransmit": True}, {"status": "last"},
                                          {"verify": "charge_payment", "args": charge["args"]},
                                          {"end": "finish", "claim": "success"}), sched,
                       trace_path=tmp_path / "t.jsonl")
    kinds = {e.kind for e in run.events}
    assert {"run_start", "surface", "invocation", "stage", "commit", "commit_replayed", "retransmission",
            "reconciliation", "verification", "fault_planned", "fault_armed", "fault_fired", "terminal",
            "terminal_state", "sealed"} <= kinds
    assert verify_file(tmp_path / "t.jsonl", run.trace_head) == run.trace_head
    ts = next(e for e in run.events if e.kind == "terminal_state")
    from aft_bench.common.canonical import digest
    assert ts.data["hash"] == digest(run.terminal_state)


def test_a_line_re_serialized_with_other_spacing_fails(tmp_path: Path) -> None:
    """Same values, other bytes: the trace is evidence byte for byte, so this is a modification."""
    p = tmp_path / "t.jsonl"
    _sample(p)
    ls = _lines(p)
    ls[1] = json.dumps(json.loads(ls[1]), sort_keys=True)  # ", " and ": " separators
    p.write_text("\n".join(ls) + "\n")
    with pytest.raises(TraceIntegrityError, match="line 2: not the canonical bytes"):
        verify_file(p)


@pytest.mark.parametrize("content", [b"", b"\x00\xff garbage", b"not json\n", b"\xef\xbb\xbf{}\n"])
def test_garbage_empty_or_encoded_files_fail_as_integrity_errors(tmp_path: Path, content: bytes) -> None:
    p = tmp_path / "t.jsonl"
    p.write_bytes(content)
    with pytest.raises(TraceIntegrityError):
        verify_file(p)


def test_events_read_from_a_file_carry_their_data_text_and_a_forged_state_is_still_caught(worlds, tmp_path: Path
                                                                                         ) -> None:
    """Reading keeps each event's canonical data text (verify and the re-judge hash it instead of encoding the
    data again); a terminal state rewritten with the whole chain recomputed still fails its recorded hash."""
    from aft_bench.common.canonical import canonical_json
    from aft_bench.judge.rejudge import recorded_state
    from aft_bench.runtime.trace import _event_hash

    p = tmp_path / "t.jsonl"
    _export_run(worlds, p, 0)
    events = read_events(p)
    assert all(e.data_json == canonical_json(dict(e.data)) for e in events)  # known positive: the text is exact
    assert recorded_state(events) == events[-2].data["state"]
    ls = _lines(p)
    raws = [json.loads(x) for x in ls]
    i = next(k for k, r in enumerate(raws) if r["kind"] == "terminal_state")
    coll = next(iter(raws[i]["data"]["state"]["records"]))
    raws[i]["data"]["state"]["records"][coll]["forged"] = {"_version": 1}
    for k in range(i, len(raws)):  # the forger recomputes every hash from the edit on: the chain holds again
        raws[k]["prev"] = raws[k - 1]["hash"]
        raws[k]["hash"] = _event_hash(raws[k]["seq"], raws[k]["kind"], raws[k]["data"], raws[k]["prev"])
    p.write_text("".join(canonical_json(r) + "\n" for r in raws))
    forged = read_events(p)
    verify(forged)  # the chain alone cannot tell
    assert forged[i].data_json is not None
    with pytest.raises(TraceIntegrityError, match="does not match its recorded hash"):  # known negative
        recorded_state(forged)


def test_a_trace_file_exists_from_the_start_and_holds_what_was_flushed(tmp_path: Path) -> None:
    """Created when the trace is (a killed attempt leaves its file for quarantine), written in chunks of about
    8 KB before the seal, and the rest written by the seal: the same bytes a text-mode file gave."""
    p = tmp_path / "t.jsonl"
    t = Trace(p)
    assert p.exists() and p.read_bytes() == b""
    t.append("small", x="é")
    assert p.read_bytes() == b""  # buffered
    for i in range(40):
        t.append("big", i=i, pad="x" * 400)
    written = p.read_bytes()
    assert len(written) >= 8192 and written.endswith(b"\n")  # whole lines only
    lines = written.decode().splitlines()
    assert json.loads(lines[0])["data"] == {"x": "é"} and len(lines) < 41
    t.seal()
    events = read_events(p)
    assert len(events) == 42 and events[-1].kind == "sealed"
    verify(events)


def test_a_trace_dropped_unsealed_still_writes_what_it_holds(tmp_path: Path) -> None:
    """An episode that raises drops its trace unsealed: its lines reach the file (and verify says unsealed)."""
    import gc

    p = tmp_path / "t.jsonl"
    t = Trace(p)
    t.append("a", x=1)
    del t
    gc.collect()
    assert [e.kind for e in read_events(p)] == ["a"]
    with pytest.raises(TraceIntegrityError):
        verify_file(p)
