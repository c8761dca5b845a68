"""The SQLite store (`world/sqlite_store.py`) through its own API, step by step against the memory store (the
reference): every return value and the whole state after each step are equal; plus the database file's schema,
idempotency keys enforced by the database, durable invocation state across reopen, the SQL self-counts, and
the errors for corrupt or locked files. Written for `make mutants`; no episode is run."""

from __future__ import annotations

import copy
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.exc import IntegrityError

from aft_bench.common.cache import BoundedCache
from aft_bench.common.errors import InputError
from aft_bench.world import sqlite_store as ss
from aft_bench.world.manifest import VERSION
from aft_bench.world.sqlite_store import SqliteStore
from aft_bench.world.store import MemoryStore


@pytest.fixture()
def fresh(monkeypatch) -> None:
    """Build the schema and the template database as a fresh process would (both are cached per process; a
    warm cache would hide the code that makes them from the test)."""
    monkeypatch.setattr(ss, "_SCHEMAS", BoundedCache(32))
    monkeypatch.setattr(ss, "_TEMPLATES", BoundedCache(32))


def entry(index: int, key: str | None, parts: list[str], *, op: str = "charge_payment", ref: str = "payments/p9",
          authorized: bool = True, effect_id: str = "e1") -> dict[str, Any]:
    return {"index": index, "effect_id": effect_id, "op": op, "effect": "create",
            "business_args": {"order_id": "o1", "amount": 50 + index}, "invocation": f"i{index}",
            "principal": "agent", "authorized": authorized, "idempotency_key": key,
            "targets": [{"ref": ref, "changed": True}, {"ref": "orders/o1"}], "parts_total": 2,
            "parts_realized": parts, "compensated": False, "result": {"payment_id": f"p{index}", "n": [index]}}


@pytest.fixture()
def pair(payments, tmp_path: Path):
    s0 = payments.initial_state(None)
    mem, sql = MemoryStore(), SqliteStore(tmp_path / "a.sqlite", payments)
    mem.load(copy.deepcopy(s0))
    sql.load(copy.deepcopy(s0))
    yield mem, sql, s0
    sql.close()


def same(mem: MemoryStore, sql: SqliteStore) -> None:
    assert sql.view() == mem.view()
    assert sql.snapshot_text() == mem.snapshot_text()


def test_a_loaded_store_is_the_initial_state(fresh, pair) -> None:
    mem, sql, s0 = pair
    same(mem, sql)
    assert sql.view() == s0 and repr(sql) == f"database {sql.path}"
    assert sql.get("customers", "c1") == {VERSION: 1, "email": "ada@example.org", "name": "Ada Byron",
                                          "tier": "standard"}
    assert sql.get("customers", "nobody") is None and mem.get("customers", "nobody") is None
    assert [k for k, _ in sql.scan("customers")] == sorted(s0["records"]["customers"]) == [k for k, _ in
                                                                                        mem.scan("customers")]
    assert sql.scan("refunds") == mem.scan("refunds")
    for store in (mem, sql):  # a record inserted later still scans in key order
        store.insert("customers", "a0", {VERSION: 1, "name": "first"})
    assert [k for k, _ in sql.scan("customers")][:2] == ["a0", "c1"] == [k for k, _ in mem.scan("customers")][:2]
    assert sql.permissions("supervisor") == mem.permissions("supervisor") == sorted(s0["permissions"]["supervisor"])
    assert sql.permissions("nobody") == []


def test_writes_versions_and_preconditions_equal_the_memory_store(pair) -> None:
    mem, sql, _ = pair
    for store in (mem, sql):
        assert store.write("customers", "c1", {"email": "new@x"}) == (1, 2, True)
        assert store.write("customers", "c1", {"email": "new@x"}) == (2, 2, False)  # no change, no new version
        assert store.write("customers", "c1", {"email": "new@x"}, force=True) == (2, 3, True)
        assert store.write("customers", "c1", {"tier": "gold"}, expected_version=2) is None  # stale
        assert store.write("customers", "c1", {"tier": "gold"}, expected_version=3) == (3, 4, True)
        assert store.write("customers", "c2", {"tier": "gold", "name": "Brian Kernighan"}) == (1, 1, False)
        assert store.write("customers", "c2", {"tier": "gold", "name": "B"}) == (1, 2, True)
    same(mem, sql)
    assert sql.get("customers", "c1") == {VERSION: 4, "email": "new@x", "name": "Ada Byron", "tier": "gold"}


def test_a_concurrent_version_move_fails_the_conditional_update(pair, payments) -> None:
    _, sql, _ = pair
    real_get = sql.get
    sql.get = lambda coll, key: {**real_get(coll, key), VERSION: 0}  # type: ignore[method-assign]
    assert sql.write("customers", "c1", {"email": "z"}) is None
    sql.get = real_get  # type: ignore[method-assign]
    assert sql.get("customers", "c1")["email"] == "ada@example.org"


def test_inserts_counters_permissions_and_the_ledger_equal_the_memory_store(fresh, pair) -> None:
    mem, sql, _ = pair
    for store in (mem, sql):
        store.insert("payments", "p9", {VERSION: 1, "order_id": "o1", "amount": 50, "meta": {"a": [1]}})
        assert store.bump_counter("payments") == 1 and store.bump_counter("payments") == 2
        assert store.bump_counter("refunds") == 1
        store.revoke("agent", "refunds.issue")
        store.revoke("agent", "not.held")
        store.append(entry(0, "k0", ["p", "o"]))
        store.append(entry(1, None, ["p"], authorized=False))
        store.append(entry(2, "k2", [], op="refund_payment"))
    same(mem, sql)
    assert "refunds.issue" not in sql.permissions("agent") and "refunds.issue" in sql.permissions("supervisor")
    assert sql.by_key("k0") == mem.by_key("k0") == entry(0, "k0", ["p", "o"])
    assert sql.by_key("k2")["index"] == 2 and sql.by_key("nope") is None and mem.by_key("nope") is None
    assert sql.ledger()[1]["authorized"] is False and sql.ledger()[0]["authorized"] is True
    assert sql.view()["idempotency"] == {"k0": 0, "k2": 2}
    assert sql.get("payments", "p9") == {VERSION: 1, "order_id": "o1", "amount": 50, "meta": {"a": [1]}}
    with pytest.raises(IntegrityError):  # the database itself refuses a second commit under one key
        sql.append(entry(3, "k0", ["p"]))


def test_compensation_marks_the_entries_of_that_operation_on_that_record(pair) -> None:
    mem, sql, _ = pair
    for store in (mem, sql):
        store.append(entry(0, "k0", ["p"], ref="payments/p1"))
        store.append(entry(1, "k1", ["p"], ref="payments/p2"))
        store.append(entry(2, "k2", ["p"], ref="payments/p1", op="other_op"))
        store.compensate("charge_payment", "payments/p1")
        store.compensate("charge_payment", "orders/none")
    same(mem, sql)
    assert [e["compensated"] for e in sql.ledger()] == [True, False, False]
    sql.compensate("charge_payment", "orders/o1")  # the second target of every entry
    assert [e["compensated"] for e in sql.ledger()] == [True, True, False]


def test_self_counts_by_sql(pair) -> None:
    mem, sql, _ = pair
    assert sql.self_counts() == {"commits": 0, "duplicate_effects": 0, "unauthorized_effects": 0}
    sql.append(entry(0, "k0", ["p", "o"]))
    sql.append(entry(1, "k1", ["p", "o"], authorized=False))  # re-realizes both parts of e1: one duplicate commit
    sql.append(entry(2, "k2", ["x"]))
    sql.append(entry(3, "k3", ["p"], effect_id="e2"))  # another effect: no duplicate
    sql.append(entry(4, "k4", ["p"], authorized=False))
    counts = sql.self_counts()
    assert counts == {"commits": 5, "duplicate_effects": 2, "unauthorized_effects": 2}
    assert all(type(v) is int for v in counts.values()) and mem.self_counts() is None


def test_durable_invocation_state_survives_reopen_and_reload_clears_it(fresh, pair, payments) -> None:
    _, sql, s0 = pair
    assert sql.durable_get("i1") is None and sql.durable_keys() == []
    sql.durable_put("i2", '{"a":1}')
    sql.durable_put("i1", "x")
    sql.durable_put("i2", '{"a":2}')
    sql.write("customers", "c1", {"email": "kept@x"})
    sql.reopen()
    assert sql.durable_get("i2") == '{"a":2}' and sql.durable_keys() == ["i1", "i2"]
    assert sql.get("customers", "c1")["email"] == "kept@x"
    other = SqliteStore(sql.path, payments)  # a second process opening the same file sees it too
    assert other.durable_keys() == ["i1", "i2"] and other.get("customers", "c1")[VERSION] == 2
    other.close()
    sql.load(copy.deepcopy(s0))  # an existing file is emptied before the new state goes in
    assert sql.durable_keys() == [] and sql.view() == s0


def test_reloading_an_existing_file_replaces_every_row(payments, tmp_path: Path) -> None:
    s0 = payments.initial_state(None)
    first = SqliteStore(tmp_path / "r.sqlite", payments)
    first.load(copy.deepcopy(s0))
    first.append(entry(0, "k0", ["p"]))
    first.close()
    again = SqliteStore(tmp_path / "r.sqlite", payments)
    assert again.ledger()[0]["idempotency_key"] == "k0"
    again.load(copy.deepcopy(s0))
    assert again.view() == s0 and again.self_counts()["commits"] == 0
    with_ledger = copy.deepcopy(s0)
    with_ledger["ledger"] = [entry(0, "k0", ["p"])]
    with_ledger["idempotency"] = {"k0": 0}
    with_ledger["permissions"]["nobody"] = []
    with_ledger["records"]["refunds"] = {}
    again.load(copy.deepcopy(with_ledger))
    assert again.view() == with_ledger
    again.close()
    again.close()  # closing twice is harmless


def test_a_write_transaction_commits_at_its_end_and_nests(pair, payments) -> None:
    _, sql, _ = pair
    with sql.transaction():
        sql.write("customers", "c1", {"email": "t@x"})
        with sql.transaction():
            sql.write("customers", "c2", {"email": "u@x"})
        peek = sqlite3.connect(sql.path)
        assert peek.execute("SELECT COUNT(*) FROM c_customers WHERE version = 2").fetchone() == (0,)
        peek.close()
    peek = sqlite3.connect(sql.path)
    assert peek.execute("SELECT COUNT(*) FROM c_customers WHERE version = 2").fetchone() == (2,)
    peek.close()
    with pytest.raises(RuntimeError), sql.transaction():
        sql.write("customers", "c3", {"email": "v@x"})
        raise RuntimeError("rolled back")
    assert sql.get("customers", "c3")[VERSION] == 1
    with sql.transaction():  # usable again after a failure
        sql.write("customers", "c3", {"email": "w@x"})
    assert sql.get("customers", "c3")[VERSION] == 2
    sql.get("customers", "c1")  # an implicit read transaction is open; a write still commits for real
    sql.durable_put("i", "d")
    peek = sqlite3.connect(sql.path)
    assert peek.execute("SELECT data FROM invocations").fetchall() == [("d",)]
    peek.close()


def test_the_database_file(fresh, pair) -> None:
    _, sql, _ = pair
    db = sqlite3.connect(sql.path)
    assert db.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    schema = dict(db.execute("SELECT name, sql FROM sqlite_master WHERE sql IS NOT NULL ORDER BY name").fetchall())
    db.close()
    assert schema == SCHEMA
    assert sql._c().execute(ss.text("PRAGMA synchronous")).scalar() == 2  # FULL


SCHEMA = {  # the database file as a reader sees it: one table per collection, the ledger with its UNIQUE key
    'c_customers': (
        'CREATE TABLE c_customers (\n'
        '\t"key" VARCHAR NOT NULL, \n'
        '\tversion INTEGER NOT NULL, \n'
        '\tdata TEXT NOT NULL, \n'
        '\tPRIMARY KEY ("key")\n'
        ')'
    ),
    'counters': (
        'CREATE TABLE counters (\n'
        '\tcollection VARCHAR NOT NULL, \n'
        '\tn INTEGER NOT NULL, \n'
        '\tPRIMARY KEY (collection)\n'
        ')'
    ),
    'invocations': (
        'CREATE TABLE invocations (\n'
        '\tinv VARCHAR NOT NULL, \n'
        '\tdata TEXT NOT NULL, \n'
        '\tPRIMARY KEY (inv)\n'
        ')'
    ),
    'ledger': (
        'CREATE TABLE ledger (\n'
        '\tidx INTEGER NOT NULL, \n'
        '\teffect_id VARCHAR NOT NULL, \n'
        '\top VARCHAR NOT NULL, \n'
        '\teffect VARCHAR NOT NULL, \n'
        '\tbusiness_args TEXT NOT NULL, \n'
        '\tinvocation VARCHAR NOT NULL, \n'
        '\tprincipal VARCHAR NOT NULL, \n'
        '\tauthorized BOOLEAN NOT NULL, \n'
        '\tidempotency_key VARCHAR, \n'
        '\ttargets TEXT NOT NULL, \n'
        '\tparts_total INTEGER NOT NULL, \n'
        '\tparts_realized TEXT NOT NULL, \n'
        '\tcompensated BOOLEAN NOT NULL, \n'
        '\tresult TEXT NOT NULL, \n'
        '\tPRIMARY KEY (idx), \n'
        '\tUNIQUE (idempotency_key)\n'
        ')'
    ),
    'ledger_parts': (
        'CREATE TABLE ledger_parts (\n'
        '\tidx INTEGER NOT NULL, \n'
        '\teffect_id VARCHAR NOT NULL, \n'
        '\tpart VARCHAR NOT NULL\n'
        ')'
    ),
    'permissions': (
        'CREATE TABLE permissions (\n'
        '\tprincipal VARCHAR NOT NULL, \n'
        '\tpermission VARCHAR NOT NULL, \n'
        '\tPRIMARY KEY (principal, permission)\n'
        ')'
    ),
    'principals': (
        'CREATE TABLE principals (\n'
        '\tprincipal VARCHAR NOT NULL, \n'
        '\tPRIMARY KEY (principal)\n'
        ')'
    ),
}
for _coll in ("order_lines", "orders", "payments", "refunds"):
    SCHEMA[f"c_{_coll}"] = SCHEMA["c_customers"].replace("c_customers", f"c_{_coll}")


def _handles(path: Path) -> int:
    """File descriptors of this process open on the database file (or its WAL and shared-memory files)."""
    import os

    names = {str(path), f"{path}-wal", f"{path}-shm"}
    return sum(1 for fd in os.listdir("/proc/self/fd") if os.path.realpath(f"/proc/self/fd/{fd}") in names)


def test_a_corrupt_file_is_an_input_error_naming_it(payments, tmp_path: Path) -> None:
    bad = tmp_path / "bad.sqlite"
    bad.write_bytes(b"not a database" * 100)
    with pytest.raises(InputError) as err:
        SqliteStore(bad, payments)
    assert err.value.path == str(bad) and err.value.field == "database" and err.value.value == str(bad)
    assert err.value.problem.startswith("not a usable SQLite database (")
    assert _handles(bad) == 0  # nothing of the refused file is left open


def test_a_locked_file_is_an_input_error_naming_it(payments, tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "l.sqlite"
    monkeypatch.setattr(ss, "LOCK_TIMEOUT_S", 0.05)
    store = SqliteStore(path, payments)
    store.load(payments.initial_state(None))
    holder = sqlite3.connect(path, timeout=0.05)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(InputError) as err:
            store.load(payments.initial_state(None))
        assert err.value.problem.startswith("database is locked by another process (")
        assert (err.value.path, err.value.field, err.value.value) == (str(path), "database", str(path))
    finally:
        holder.rollback()
        holder.close()
        store.close()


def test_an_unopenable_path_is_an_input_error(payments, tmp_path: Path) -> None:
    (tmp_path / "dir.sqlite").mkdir()
    with pytest.raises(InputError) as err:
        SqliteStore(tmp_path / "dir.sqlite", payments)
    assert err.value.problem == "cannot open database (unable to open database file)"
    assert (err.value.path, err.value.field, err.value.value) == (str(tmp_path / "dir.sqlite"), "database",
                                                                  str(tmp_path / "dir.sqlite"))


def test_a_file_locked_at_open_is_named_within_the_lock_timeout(payments, tmp_path: Path, monkeypatch) -> None:
    import time

    path = tmp_path / "held.sqlite"
    store = SqliteStore(path, payments)
    store.load(payments.initial_state(None))
    store.close()
    monkeypatch.setattr(ss, "LOCK_TIMEOUT_S", 0.05)
    holder = sqlite3.connect(path)
    holder.execute("PRAGMA locking_mode=EXCLUSIVE")
    holder.execute("BEGIN EXCLUSIVE")
    holder.execute("UPDATE counters SET n = n + 1")
    t0 = time.monotonic()
    try:
        with pytest.raises(InputError) as err:
            SqliteStore(path, payments)
        assert time.monotonic() - t0 < 1.5  # the store's lock timeout, not the driver's default of 5 s
        assert err.value.problem == "database is locked by another process (database is locked)"
        assert (err.value.path, err.value.field, err.value.value) == (str(path), "database", str(path))
        assert _handles(path) >= 1
    finally:
        holder.rollback()
        holder.close()
    assert _handles(path) == 0  # only the holder had it open: the refused store closed its own connection


def test_a_store_in_a_new_nested_folder(payments, tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "a" / "b" / "run.sqlite", payments)
    store.load(payments.initial_state(None))
    assert store.get("customers", "c1")[VERSION] == 1
    store.close()


def test_each_world_gets_its_own_schema_in_one_process(fresh, payments, exports, tmp_path: Path) -> None:
    a, b = SqliteStore(tmp_path / "p.sqlite", payments), SqliteStore(tmp_path / "e.sqlite", exports)
    a.load(payments.initial_state(None))
    b.load(exports.initial_state(None))
    assert b.view() == exports.initial_state(None) and a.view() == payments.initial_state(None)
    db = sqlite3.connect(tmp_path / "e.sqlite")
    tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    db.close()
    assert {f"c_{c}" for c in exports.manifest.collections} <= tables
    assert not {f"c_{c}" for c in payments.manifest.collections} - {f"c_{c}" for c in exports.manifest.collections} \
        & tables
    a.close()
    b.close()


def test_stores_are_made_on_other_threads_than_the_first(fresh, payments, tmp_path: Path) -> None:
    import threading

    SqliteStore(tmp_path / "main.sqlite", payments).close()  # the template is made on this thread
    errors: list[BaseException] = []

    def worker() -> None:
        try:
            store = SqliteStore(tmp_path / "thread.sqlite", payments)
            store.load(payments.initial_state(None))
            store.close()
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    t = threading.Thread(target=worker)
    t.start()
    t.join()
    assert errors == []


def test_a_write_failure_other_than_a_lock_is_named(payments, tmp_path: Path, monkeypatch) -> None:
    from sqlalchemy.exc import OperationalError

    store = SqliteStore(tmp_path / "w.sqlite", payments)

    def fail(_s0):
        raise OperationalError("INSERT", None, Exception("disk I/O error"))

    monkeypatch.setattr(store, "_load", fail)
    with pytest.raises(InputError) as err:
        store.load({})
    assert err.value.problem == "cannot write database (disk I/O error)"
    store.close()


def test_a_file_that_fails_its_integrity_check_is_named_with_the_report(payments, tmp_path: Path) -> None:
    """A file that opens but whose `PRAGMA quick_check` reports damage (here a NULL where the schema forbids one,
    planted behind SQLite's back) is refused with the check's own report."""
    path = tmp_path / "damaged.sqlite"
    store = SqliteStore(path, payments)
    store.load(payments.initial_state(None))
    store.close()
    con = sqlite3.connect(path)
    schema = con.execute("SELECT sql FROM sqlite_master WHERE name = 'c_customers'").fetchone()[0]
    con.execute("PRAGMA writable_schema=ON")
    con.execute("UPDATE sqlite_master SET sql = ? WHERE name = 'c_customers'",
                (schema.replace("data TEXT NOT NULL", "data TEXT"),))
    con.commit()
    con.close()
    con = sqlite3.connect(path)
    con.execute("INSERT INTO c_customers VALUES ('zz', 1, NULL)")
    con.commit()
    con.close()
    con = sqlite3.connect(path)
    con.execute("PRAGMA writable_schema=ON")
    con.execute("UPDATE sqlite_master SET sql = ? WHERE name = 'c_customers'", (schema,))
    con.commit()
    con.close()
    with pytest.raises(InputError) as err:
        SqliteStore(path, payments)
    assert err.value.problem == "not a usable SQLite database (NULL value in c_customers.data)"
    assert _handles(path) == 0  # the connection that ran the check is closed, not left to the garbage collector
    assert (err.value.path, err.value.field, err.value.value) == (str(path), "database", str(path))


def test_a_file_whose_schema_check_fails_is_named_and_left_closed(payments, tmp_path: Path, monkeypatch) -> None:
    """An I/O error after the connection is made (here in the schema check, injected): the store names the file
    and the error, and closes the connection it made."""
    from sqlalchemy.exc import OperationalError

    path = tmp_path / "io.sqlite"
    SqliteStore(path, payments).close()
    meta, _ = ss._schema(payments)

    def fail(_conn) -> None:
        raise OperationalError("CREATE TABLE", None, Exception("disk I/O error"))

    monkeypatch.setattr(meta, "create_all", fail)
    with pytest.raises(InputError) as err:
        SqliteStore(path, payments)
    assert err.value.problem == "cannot open database (disk I/O error)"
    assert _handles(path) == 0


def test_an_opener_connects_each_store_to_its_own_file(payments, tmp_path: Path) -> None:
    """The process's one opener is made at import; a fresh one behaves the same: the first connect makes its engine,
    each connection goes to the file named, with the store's pragmas, and the opener then names no file."""
    opener = ss._Opener()
    for name in ("a.sqlite", "b.sqlite"):
        SqliteStore(tmp_path / name, payments).close()  # a file with the world's schema
    a, b = opener.connect(tmp_path / "a.sqlite"), opener.connect(tmp_path / "b.sqlite")
    try:
        assert a.exec_driver_sql("PRAGMA database_list").fetchone()[2] == str(tmp_path / "a.sqlite")
        assert b.exec_driver_sql("PRAGMA database_list").fetchone()[2] == str(tmp_path / "b.sqlite")
        assert a.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert a.exec_driver_sql("PRAGMA synchronous").scalar() == 2  # FULL
        assert opener._path is None
    finally:
        a.close()
        b.close()
