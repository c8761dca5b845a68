"""The SQLite store (SQLAlchemy 2.x Core): the same backend state behind a real transaction boundary.

One database file per run. Tables are generated from the world manifest (one per collection), plus the
effect ledger, its realized parts, permissions, key counters and the durable invocation table. Each
WRITE is one transaction whose COMMIT is the EFFECT_COMMITTED stage; the idempotency key is a UNIQUE
constraint, a version precondition is a conditional `UPDATE ... WHERE version = ?`, and authority is read
in the same transaction as the write. WAL journal, synchronous=FULL.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from sqlalchemy import Boolean, Column, Integer, MetaData, String, Table, Text, create_engine, event, select, text
from sqlalchemy.dialects.sqlite import dialect as sqlite_dialect
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import DatabaseError, OperationalError
from sqlalchemy.pool import NullPool
from sqlalchemy.schema import CreateIndex, CreateTable
from sqlalchemy.util import LRUCache

from aft_bench.common.cache import BoundedCache
from aft_bench.common.canonical import canonical_json
from aft_bench.common.errors import InputError
from aft_bench.world.manifest import VERSION, World

LOCK_TIMEOUT_S = 2.0


def _required(name: str, type_: Any) -> Column[Any]:
    """A NOT NULL column; every column that is neither part of a primary key nor the idempotency key is one."""
    return Column(name, type_, nullable=False)


def _tables(world: World, meta: MetaData) -> dict[str, Table]:
    t: dict[str, Table] = {}
    for coll in world.manifest.collections:
        t[f"c:{coll}"] = Table(f"c_{coll}", meta, Column("key", String, primary_key=True),
                               _required("version", Integer), _required("data", Text))
    t["ledger"] = Table("ledger", meta, Column("idx", Integer, primary_key=True, autoincrement=False),
                        _required("effect_id", String), _required("op", String), _required("effect", String),
                        _required("business_args", Text), _required("invocation", String),
                        _required("principal", String), _required("authorized", Boolean),
                        Column("idempotency_key", String, unique=True, nullable=True),
                        _required("targets", Text), _required("parts_total", Integer),
                        _required("parts_realized", Text), _required("compensated", Boolean),
                        _required("result", Text))
    t["parts"] = Table("ledger_parts", meta, _required("idx", Integer), _required("effect_id", String),
                       _required("part", String))
    t["permissions"] = Table("permissions", meta, Column("principal", String, primary_key=True),
                             Column("permission", String, primary_key=True))
    t["principals"] = Table("principals", meta, Column("principal", String, primary_key=True))
    t["counters"] = Table("counters", meta, Column("collection", String, primary_key=True), _required("n", Integer))
    t["invocations"] = Table("invocations", meta, Column("inv", String, primary_key=True), _required("data", Text))
    return t


# Shared per process and bounded: table objects per world schema, SQLAlchemy's compiled-statement cache (so
# the thousands of short-lived per-run connections reuse compiled SQL), and an in-memory database per schema
# that each run's file starts as a copy of (SQLite's backup API; no template file on disk).
_SCHEMAS: BoundedCache[str, tuple[MetaData, dict[str, Table]]] = BoundedCache(32)
_TEMPLATES: BoundedCache[str, sqlite3.Connection] = BoundedCache(32)
_COMPILED: Any = LRUCache(500)
_DIALECT = sqlite_dialect()


def _schema(world: World) -> tuple[MetaData, dict[str, Table]]:
    def make() -> tuple[MetaData, dict[str, Table]]:
        meta = MetaData()
        return meta, _tables(world, meta)

    return _SCHEMAS.get(world.hash, make)


def _template(world: World) -> sqlite3.Connection:
    """An empty in-memory database with this world's schema, made once per process and copied per run."""
    def make() -> sqlite3.Connection:
        meta, _ = _schema(world)
        raw = sqlite3.connect(":memory:", check_same_thread=False)
        for table in meta.sorted_tables:
            raw.execute(str(CreateTable(table).compile(dialect=_DIALECT)))
            for index in table.indexes:
                raw.execute(str(CreateIndex(index).compile(dialect=_DIALECT)))
        raw.commit()
        return raw

    return _TEMPLATES.get(world.hash, make)


def _pragmas(dbapi_conn: Any, _record: Any) -> None:
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA synchronous=FULL")
    cur.close()


class _Opener:
    """One engine for every store of the process, connecting to the file the store being opened names: SQLAlchemy
    keys its compiled-statement cache on the engine's dialect, so an engine per run compiled every statement of
    every run again (a fifth of a SQLite run's time). No pool: each store's connection is its own and closes with
    it; the pragmas are set on every new connection, as before."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._path: Path | None = None
        self._engine: Engine | None = None

    def connect(self, path: Path) -> Connection:
        with self._lock:
            if self._engine is None:
                self._engine = create_engine("sqlite:///aft-bench-store", creator=self._raw, poolclass=NullPool)
                event.listen(self._engine, "connect", _pragmas)
            self._path = path
            try:
                return self._engine.connect()
            finally:
                self._path = None

    def _raw(self) -> sqlite3.Connection:
        assert self._path is not None, "connections are made only through connect()"
        return sqlite3.connect(self._path, timeout=LOCK_TIMEOUT_S, check_same_thread=False)  # as SQLAlchemy opens files


_OPENER = _Opener()


def _close_quietly(conn: Connection | None) -> None:
    if conn is not None:
        try:
            conn.close()
        except DatabaseError:
            pass


def _create(path: Path, world: World) -> None:
    """A new database file holding the world's empty schema, in WAL mode."""
    dst = sqlite3.connect(path)
    try:
        _template(world).backup(dst)
        dst.execute("PRAGMA journal_mode=WAL")
    finally:
        dst.close()


class SqliteStore:
    """Backend state in one SQLite file. Opening an existing file checks it; a corrupt or locked file is an
    InputError naming it."""

    def __init__(self, path: str | Path, world: World) -> None:
        self.path = Path(path)
        self.world = world
        self.meta, self.t = _schema(world)
        self.conn: Connection | None = None
        self._depth = 0
        self._open()

    def __repr__(self) -> str:
        return f"database {self.path}"

    # -- connection ------------------------------------------------------------------------
    def _open(self) -> None:
        existed = self.path.exists()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fresh = not existed
        if not existed:
            _create(self.path, self.world)
        conn: Connection | None = None
        try:
            conn = _OPENER.connect(self.path).execution_options(compiled_cache=_COMPILED)
            if existed:
                ok = conn.execute(text("PRAGMA quick_check")).scalar()
                conn.commit()
                if ok != "ok":
                    raise DatabaseError("quick_check", None, Exception(str(ok)))
            if existed:
                with conn.begin():
                    self.meta.create_all(conn)
        except OperationalError as exc:
            _close_quietly(conn)
            problem = "database is locked by another process" if "locked" in str(exc) else "cannot open database"
            raise InputError(self.path, "database", str(self.path), f"{problem} ({exc.orig})") from None
        except DatabaseError as exc:
            _close_quietly(conn)
            raise InputError(self.path, "database", str(self.path), f"not a usable SQLite database ({exc.orig})") from None
        self.conn = conn

    def close(self) -> None:
        if self.conn is not None:
            if self.conn.in_transaction():
                self.conn.commit()  # only implicit read transactions can be open here
            self.conn.close()  # no pool: the file's connection closes here
        self.conn = None

    def reopen(self) -> None:
        """Drop every in-process object (the connection) and open the file again."""
        self.close()
        self._open()

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """One explicit transaction; nested use joins it. A read-only transaction that SQLAlchemy opened
        implicitly for earlier reads is closed first, so the write's COMMIT is really issued here."""
        assert self.conn is not None
        if self._depth:
            self._depth += 1
            try:
                yield
            finally:
                self._depth -= 1
            return
        if self.conn.in_transaction():
            self.conn.commit()
        with self.conn.begin():
            self._depth = 1
            try:
                yield
            finally:
                self._depth = 0

    def _c(self) -> Connection:
        assert self.conn is not None
        return self.conn

    # -- state -----------------------------------------------------------------------------
    def load(self, s0: dict[str, Any]) -> None:
        """Replace every row with s0, in one transaction; a lock held by someone else is an InputError."""
        try:
            self._load(s0)
        except OperationalError as exc:
            problem = "database is locked by another process" if "locked" in str(exc) else "cannot write database"
            raise InputError(self.path, "database", str(self.path), f"{problem} ({exc.orig})") from None

    def _load(self, s0: dict[str, Any]) -> None:
        c, t = self._c(), self.t
        with self.transaction():
            if not self._fresh:
                for table in reversed(self.meta.sorted_tables):
                    c.execute(table.delete())
            self._fresh = False
            for coll, recs in s0["records"].items():
                rows = [{"key": k, "version": r[VERSION], "data": _data(r)} for k, r in recs.items()]
                if rows:
                    c.execute(t[f"c:{coll}"].insert(), rows)
            c.execute(t["principals"].insert(), [{"principal": p} for p in s0["permissions"]])
            perms = [{"principal": p, "permission": x} for p, xs in s0["permissions"].items() for x in xs]
            if perms:
                c.execute(t["permissions"].insert(), perms)
            c.execute(t["counters"].insert(), [{"collection": k, "n": n} for k, n in s0["counters"].items()])
            for entry in s0["ledger"]:
                self.append(entry)

    def get(self, coll: str, key: str) -> dict[str, Any] | None:
        tb = self.t[f"c:{coll}"]
        row = self._c().execute(select(tb.c.version, tb.c.data).where(tb.c.key == key)).first()
        return None if row is None else {**json.loads(row.data), VERSION: row.version}

    def scan(self, coll: str) -> list[tuple[str, dict[str, Any]]]:
        tb = self.t[f"c:{coll}"]
        rows = self._c().execute(select(tb.c.key, tb.c.version, tb.c.data).order_by(tb.c.key))
        return [(r.key, {**json.loads(r.data), VERSION: r.version}) for r in rows]

    def write(self, coll: str, key: str, values: dict[str, Any], expected_version: int | None = None,
              force: bool = False) -> tuple[int, int, bool] | None:
        rec = self.get(coll, key)
        assert rec is not None
        before = rec[VERSION]
        if expected_version is not None and before != expected_version:
            return None
        changed = force or any(rec.get(f) != v for f, v in values.items())
        if not changed:
            return before, before, False
        tb = self.t[f"c:{coll}"]
        new = {**{k: v for k, v in rec.items() if k != VERSION}, **values}
        # the conditional UPDATE is the precondition: it matches no row if anyone moved the version
        res = self._c().execute(tb.update().where(tb.c.key == key, tb.c.version == before)
                                .values(version=before + 1, data=_data(new)))
        if res.rowcount != 1:
            return None
        return before, before + 1, True

    def insert(self, coll: str, key: str, rec: dict[str, Any]) -> None:
        self._c().execute(self.t[f"c:{coll}"].insert().values(key=key, version=rec[VERSION], data=_data(rec)))

    def bump_counter(self, coll: str) -> int:
        tb = self.t["counters"]
        self._c().execute(tb.update().where(tb.c.collection == coll).values(n=tb.c.n + 1))
        return int(self._c().execute(select(tb.c.n).where(tb.c.collection == coll)).scalar_one())

    def permissions(self, principal: str) -> list[str]:
        tb = self.t["permissions"]
        rows = self._c().execute(select(tb.c.permission).where(tb.c.principal == principal).order_by(tb.c.permission))
        return [r.permission for r in rows]

    def revoke(self, principal: str, permission: str) -> None:
        tb = self.t["permissions"]
        self._c().execute(tb.delete().where(tb.c.principal == principal, tb.c.permission == permission))

    def ledger(self) -> list[dict[str, Any]]:
        tb = self.t["ledger"]
        return [_entry(r) for r in self._c().execute(select(tb).order_by(tb.c.idx))]

    def by_key(self, key: str) -> dict[str, Any] | None:
        tb = self.t["ledger"]
        row = self._c().execute(select(tb).where(tb.c.idempotency_key == key)).first()
        return None if row is None else _entry(row)

    def append(self, entry: dict[str, Any]) -> None:
        """Insert a ledger row; the UNIQUE idempotency key makes a second commit under one key impossible."""
        row = {
            "idx": entry["index"], "effect_id": entry["effect_id"], "op": entry["op"], "effect": entry["effect"],
            "business_args": canonical_json(entry["business_args"]), "invocation": entry["invocation"],
            "principal": entry["principal"], "authorized": entry["authorized"],
            "idempotency_key": entry["idempotency_key"], "targets": canonical_json(entry["targets"]),
            "parts_total": entry["parts_total"], "parts_realized": canonical_json(entry["parts_realized"]),
            "compensated": entry["compensated"], "result": canonical_json(entry["result"]),
        }
        self._c().execute(self.t["ledger"].insert().values(**row))
        parts = [{"idx": entry["index"], "effect_id": entry["effect_id"], "part": p} for p in entry["parts_realized"]]
        if parts:
            self._c().execute(self.t["parts"].insert(), parts)

    def compensate(self, op_name: str, ref: str) -> None:
        tb = self.t["ledger"]
        for e in self.ledger():
            if e["op"] == op_name and any(t["ref"] == ref for t in e["targets"]):
                self._c().execute(tb.update().where(tb.c.idx == e["index"]).values(compensated=True))

    def view(self) -> dict[str, Any]:
        """The state as the same dict the memory store holds."""
        c, t = self._c(), self.t
        records = {coll: dict(self.scan(coll)) for coll in self.world.manifest.collections}
        principals = [r.principal for r in c.execute(select(t["principals"].c.principal))]
        permissions = {p: self.permissions(p) for p in principals}
        counters = {r.collection: r.n for r in c.execute(select(t["counters"]))}
        ledger = self.ledger()
        idem = {e["idempotency_key"]: e["index"] for e in ledger if e["idempotency_key"] is not None}
        return {"records": records, "permissions": permissions, "counters": counters, "ledger": ledger,
                "idempotency": idem}

    def snapshot_text(self) -> str:
        return canonical_json(self.view())

    # -- durable invocation state (opaque JSON documents the runtime owns) ----------------------
    def durable_get(self, inv: str) -> str | None:
        tb = self.t["invocations"]
        row = self._c().execute(select(tb.c.data).where(tb.c.inv == inv)).first()
        return None if row is None else str(row.data)

    def durable_put(self, inv: str, data: str) -> None:
        from sqlalchemy.dialects.sqlite import insert

        stmt = insert(self.t["invocations"]).values(inv=inv, data=data)
        with self.transaction():
            self._c().execute(stmt.on_conflict_do_update(index_elements=["inv"], set_={"data": data}))

    def durable_keys(self) -> list[str]:
        tb = self.t["invocations"]
        return [r.inv for r in self._c().execute(select(tb.c.inv).order_by(tb.c.inv))]

    # -- labels straight from SQL, to cross-check the trace ------------------------------------
    def self_counts(self) -> dict[str, int]:
        """Committed effects, duplicate commits (re-realized effect parts) and unauthorized commits, by SQL."""
        c = self._c()
        commits = c.execute(text("SELECT COUNT(*) FROM ledger")).scalar_one()
        dup = c.execute(text(
            "SELECT COUNT(DISTINCT b.idx) FROM ledger_parts a JOIN ledger_parts b "
            "ON a.effect_id = b.effect_id AND a.part = b.part AND a.idx < b.idx")).scalar_one()
        unauth = c.execute(text("SELECT COUNT(*) FROM ledger WHERE NOT authorized")).scalar_one()
        return {"commits": int(commits), "duplicate_effects": int(dup), "unauthorized_effects": int(unauth)}


def _data(rec: dict[str, Any]) -> str:
    return canonical_json({k: v for k, v in rec.items() if k != VERSION})


def _entry(r: Any) -> dict[str, Any]:
    return {
        "index": r.idx, "effect_id": r.effect_id, "op": r.op, "effect": r.effect,
        "business_args": json.loads(r.business_args), "invocation": r.invocation, "principal": r.principal,
        "authorized": bool(r.authorized), "idempotency_key": r.idempotency_key, "targets": json.loads(r.targets),
        "parts_total": r.parts_total, "parts_realized": json.loads(r.parts_realized),
        "compensated": bool(r.compensated), "result": json.loads(r.result),
    }


