"""The SQLite backend: parity with memory, database-enforced effect semantics, durable invocation state,
labels cross-checked by SQL, and clear errors for corrupt or locked files."""

from __future__ import annotations

import sqlite3
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest
from sqlalchemy import text
from sqlalchemy.exc import IntegrityError

from aft_bench.common.errors import HarnessError, InputError
from aft_bench.episode.episode import run_scripted
from aft_bench.experiment.build import run_cell
from aft_bench.experiment.config import load_matrix
from aft_bench.experiment.runner import run_matrix
from aft_bench.runtime.faults import FaultSchedule, FaultSpec
from aft_bench.runtime.trace import read_events
from aft_bench.world.backend import Backend, Guards, MemoryBackend
from aft_bench.world.sqlite_store import SqliteStore

from conftest import ROOT, WORLDS, steps, task_of

CHARGE = {"order_id": "o1", "amount": 50, "note": ""}


def _sqlite(world, tmp_path: Path, name: str = "a.sqlite", overrides=None) -> Backend:
    return Backend(world, overrides, SqliteStore(tmp_path / name, world))


def test_same_operations_same_state_hash(payments, tmp_path: Path) -> None:
    mem, sql = MemoryBackend(payments), _sqlite(payments, tmp_path)
    assert mem.state_hash() == sql.state_hash() == sql.s0_hash
    for be in (mem, sql):
        p = be.resolve("charge_payment", CHARGE)
        be.commit(p, effect_id="e", invocation="i1", principal="agent", guards=Guards("k"))
        be.commit(p, effect_id="e", invocation="i2", principal="agent", guards=Guards("k"))
        be.concurrent_write("customers/c1", {"note": "x"})
        u = be.resolve("update_customer_email", {"customer_id": "c1", "email": "n@x"})
        be.commit(u, effect_id="u", invocation="i3", principal="agent", guards=Guards(expected_version=1))
        be.revoke("agent", "refunds.issue")
        r = be.resolve("refund_payment", {"payment_id": "p0", "amount": 30})
        be.commit(r, effect_id="r", invocation="i4", principal="agent")
    assert mem.state_hash() == sql.state_hash()
    assert mem.snapshot() == sql.snapshot()


def test_wal_and_full_synchronous(payments, tmp_path: Path) -> None:
    sql = _sqlite(payments, tmp_path)
    assert sql.store.conn.execute(text("PRAGMA journal_mode")).scalar() == "wal"
    assert sql.store.conn.execute(text("PRAGMA synchronous")).scalar() == 2  # FULL


def test_idempotency_key_is_a_unique_constraint(payments, tmp_path: Path) -> None:
    sql = _sqlite(payments, tmp_path)
    p = sql.resolve("charge_payment", CHARGE)
    entry = sql.commit(p, effect_id="e", invocation="i1", principal="agent", guards=Guards("k")).entry
    with pytest.raises(IntegrityError):
        with sql.store.transaction():
            sql.store.append({**entry, "index": 99})


def test_version_precondition_is_a_conditional_update(payments, tmp_path: Path) -> None:
    sql = _sqlite(payments, tmp_path)
    # another connection moves the version underneath the store
    other = sqlite3.connect(tmp_path / "a.sqlite")
    other.execute("UPDATE c_customers SET version = version + 1 WHERE key = 'c1'")
    other.commit()
    other.close()
    u = sql.resolve("update_customer_email", {"customer_id": "c1", "email": "n@x"})
    out = sql.commit(u, effect_id="u", invocation="i", principal="agent", guards=Guards(expected_version=1))
    assert out.status == "precondition_failed" and sql.record("customers/c1")["email"] == "ada@example.org"
    assert sql.store.ledger() == []  # the rejected transaction left nothing behind


def test_authority_is_read_inside_the_write_transaction(payments, tmp_path: Path) -> None:
    sql = _sqlite(payments, tmp_path)
    r = sql.resolve("refund_payment", {"payment_id": "p0", "amount": 30})
    sql.revoke("agent", "refunds.issue")
    out = sql.commit(r, effect_id="r", invocation="i", principal="agent", guards=Guards(authority_at_commit=True))
    assert out.status == "unauthorized" and sql.store.ledger() == []
    assert sql.store.self_counts()["commits"] == 0


def test_committed_effect_is_durable_across_reopen(payments, tmp_path: Path) -> None:
    sql = _sqlite(payments, tmp_path)
    sql.commit(sql.resolve("charge_payment", CHARGE), effect_id="e", invocation="i", principal="agent")
    fresh = sqlite3.connect(tmp_path / "a.sqlite")  # an independent reader sees the committed row
    assert fresh.execute("SELECT COUNT(*) FROM ledger").fetchone()[0] == 1
    fresh.close()
    sql.reopen()
    assert len(sql.store.ledger()) == 1


def test_smoke_parity_memory_vs_sqlite(tmp_path: Path) -> None:
    plan = load_matrix(ROOT / "configs" / "smoke.toml", WORLDS)
    cells = [c for c in plan.cells if c.workload != "discovery" or c.catalog_size == 10]
    out = tmp_path / "traces"
    label_cols = None
    for cell in cells:
        mem = run_cell(plan, cell, tmp_path)
        sq = run_cell(plan, replace(cell, backend="sqlite"), tmp_path)
        label_cols = label_cols or [k for k in mem if k not in ("run_id", "backend", "wall_s", "trace_head")]
        assert {k: mem[k] for k in label_cols} == {k: sq[k] for k in label_cols}, cell
        term = [next(e for e in read_events(out / f"{r['run_id']}.jsonl") if e.kind == "terminal_state")
                for r in (mem, sq)]
        assert term[0].data["hash"] == term[1].data["hash"]
    assert len(list((tmp_path / "db").glob("*.sqlite"))) == len(cells)


def test_state_loss_on_sqlite_reopens_and_recovers_from_the_invocation_table(tmp_path: Path) -> None:
    plan = load_matrix(ROOT / "configs" / "smoke.toml", WORLDS)
    cell = next(c for c in plan.cells if c.workload == "state_loss" and c.condition == "I5")
    row = run_cell(plan, replace(cell, backend="sqlite"), tmp_path)
    assert row["recovered"] is True
    db = sqlite3.connect(tmp_path / "db" / f"{row['run_id']}.sqlite")
    assert db.execute("SELECT COUNT(*) FROM invocations").fetchone()[0] >= 1
    db.close()
    ev = read_events(tmp_path / "traces" / f"{row['run_id']}.jsonl")
    assert any(e.kind == "reconstructed" for e in ev)


def test_database_and_trace_disagreement_is_a_harness_error(worlds, tmp_path: Path) -> None:
    world, task = task_of(worlds, "payments/charge-o1")
    store = SqliteStore(tmp_path / "x.sqlite", world)
    original = store.self_counts
    store.self_counts = lambda: {**original(), "duplicate_effects": 1}  # type: ignore[method-assign]
    with pytest.raises(HarnessError, match="disagree"):
        run_scripted(world, task, steps({"end": "finish", "claim": "success"}), store=store)


def test_self_counts_match_trace_on_a_duplicate(worlds, tmp_path: Path) -> None:
    world, task = task_of(worlds, "payments/charge-o1")
    store = SqliteStore(tmp_path / "d.sqlite", world)
    sched = FaultSchedule(id="rl", faults=(FaultSpec(kind="response_loss", op="charge_payment"),))
    c = {"call": "charge_payment", "args": CHARGE}
    result = run_scripted(world, task, steps(c, c, {"end": "finish", "claim": "success"}), sched, store=store)
    assert result.labels.duplicate_effects == 1 == store.self_counts()["duplicate_effects"]


def test_corrupt_database_file_is_a_clear_error_and_untouched(payments, tmp_path: Path) -> None:
    path = tmp_path / "bad.sqlite"
    path.write_bytes(b"this is not a database" * 100)
    before = path.read_bytes()
    with pytest.raises(InputError) as exc:
        _sqlite(payments, tmp_path, "bad.sqlite")
    assert str(path) in str(exc.value) and "not a usable SQLite database" in str(exc.value)
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.sqlite"]


def test_locked_database_file_is_a_clear_error(payments, tmp_path: Path) -> None:
    _sqlite(payments, tmp_path, "l.sqlite").store.close()
    holder = sqlite3.connect(tmp_path / "l.sqlite", isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(InputError) as exc:
            _sqlite(payments, tmp_path, "l.sqlite")
        assert str(tmp_path / "l.sqlite") in str(exc.value) and "locked" in str(exc.value)
    finally:
        holder.execute("ROLLBACK")
        holder.close()


def test_backend_is_selectable_and_recorded(tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text('[experiment]\nid = "b"\ncomparisons = ["duplicate_effects"]\nbackend = "sqlite"\n'
                   'tasks_per_workload = 2\n')
    rows = run_matrix(load_matrix(cfg, WORLDS), tmp_path / "out", workers=1)
    assert {r["backend"] for r in rows} == {"sqlite"}
    assert pd.read_parquet(tmp_path / "out" / "results.parquet")["backend"].eq("sqlite").all()
    cfg.write_text('[experiment]\nid = "b"\ncomparisons = ["duplicate_effects"]\nbackend = "postgres"\n')
    with pytest.raises(InputError) as exc:
        load_matrix(cfg, WORLDS)
    assert exc.value.field.startswith("experiment.backends") and exc.value.value == "postgres"


def test_scripted_runs_work_on_sqlite(worlds, tmp_path: Path) -> None:
    world, task = task_of(worlds, "payments/refund-p0")
    store = SqliteStore(tmp_path / "s.sqlite", world)
    on_sqlite = run_scripted(world, task, task.script.oracle, store=store).labels
    assert on_sqlite.outcome == run_scripted(world, task, task.script.oracle).labels.outcome
