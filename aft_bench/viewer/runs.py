"""The runs table: `results.parquet` (or the journal's rows when it is not compacted yet) held once as an Arrow
table and queried server-side (filter, sort, page), so a page never ships more than `MAX_PAGE` rows."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from aft_bench.common.errors import InputError
from aft_bench.episode.row import LATE_COLUMNS, SCHEMA
from aft_bench.experiment.journal import read_rows

MAX_PAGE = 500
# the columns the runs table shows (every column of a run is on its own page)
SHOWN = ["run_id", "workload", "task_id", "condition", "fault", "fault_seed", "catalog_size", "agent", "model", "rep",
         "backend", "server", "outcome", "y_goal", "y_correct", "fault_fired", "recovered", "duplicate_effects",
         "unsafe_commits", "unauthorized_effects", "stale_writes", "unintended_effects", "residual_effects",
         "incorrect_claim", "tool_calls", "context_tokens", "recall", "cost_usd", "wall_s"]
# the columns offered as drop-down filters: the key fields and every label (any SCHEMA column may be filtered)
FACETS = ["workload", "condition", "agent", "model", "fault", "backend", "server", "outcome", "task_id", "catalog_size",
          "y_goal", "y_correct", "fault_fired", "recovered", "duplicate_effects", "unsafe_commits",
          "unauthorized_effects", "stale_writes", "unintended_effects", "residual_effects", "incorrect_claim",
          "claim_correct", "terminal_action", "terminal_claim", "mode"]


def plain(value: Any) -> Any:
    """A cell as JSON data (NaN, which the row model forbids, shown as null rather than invalid JSON)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def parse_filter(column: str, text: str) -> Any:
    """A filter value from its URL text, typed as the column (`null` for a missing value)."""
    col = SCHEMA.get(column)
    if col is None:
        raise InputError("<query>", column, text, "not a results column")
    base = col.type.rstrip("?")
    if text == "null":
        return None
    try:
        if base == "bool":
            if text not in ("true", "false"):
                raise ValueError(text)
            return text == "true"
        if base == "int":
            return int(text)
        if base == "float":
            return float(text)
    except ValueError:
        raise InputError("<query>", column, text, f"not a value of a {base} column") from None
    return text


@dataclass(frozen=True)
class Query:
    filters: tuple[tuple[str, Any], ...] = ()
    sort: str | None = None
    desc: bool = False
    page: int = 0
    size: int = 50

    @classmethod
    def from_params(cls, params: dict[str, str]) -> Query:
        """Query parameters: `<column>=<value>` filters, `sort`, `desc`, `page`, `size` (at most MAX_PAGE)."""
        filters = tuple((k, parse_filter(k, v)) for k, v in params.items() if k not in ("sort", "desc", "page", "size"))
        sort = params.get("sort") or None
        if sort is not None and sort not in SCHEMA:
            raise InputError("<query>", "sort", sort, "not a results column")
        try:
            page, size = int(params.get("page", 0)), int(params.get("size", 50))
        except ValueError:
            raise InputError("<query>", "page", params.get("page"), "not an integer") from None
        return cls(filters, sort, params.get("desc") in ("1", "true"), max(0, page), min(max(1, size), MAX_PAGE))


class RunsTable:
    """Every run of the directory, in plan order, as one Arrow table."""

    def __init__(self, table: pa.Table, source: str) -> None:
        missing = [c for c in SCHEMA if c not in table.column_names and c not in LATE_COLUMNS]
        if missing:
            raise InputError(source, "columns", missing[:5], "missing from the results table (not made by aft-bench?)")
        for c in LATE_COLUMNS:
            if c not in table.column_names:
                table = table.append_column(c, pa.nulls(len(table), pa.string()))
        self.table = table.select([c for c in SCHEMA])
        self.source = source
        ids = self.table.column("run_id").to_pylist()
        self._index = {rid: i for i, rid in enumerate(ids)}

    @classmethod
    def load(cls, directory: Path) -> RunsTable:
        """`results.parquet`, else the journal's verified rows (a torn last line is ignored, never cut)."""
        path = directory / "results.parquet"
        if path.is_file():
            try:
                return cls(pq.read_table(path), str(path))
            except (OSError, pa.ArrowException) as exc:
                raise InputError(path, "<file>", str(path), f"not a readable parquet table ({str(exc)[:100]})") from None
        rows = read_rows(directory / "journal.jsonl", repair=False)
        if not rows:
            return cls(pa.Table.from_pylist([], schema=_empty_schema()), str(directory / "journal.jsonl"))
        return cls(pa.Table.from_pylist([{c: r.get(c) for c in SCHEMA} for r in rows]), str(directory / "journal.jsonl"))

    def __len__(self) -> int:
        return len(self.table)

    def ids(self) -> list[str]:
        return list(self._index)

    def row(self, run_id: str) -> dict[str, Any] | None:
        """Every column of one run, exactly as recorded."""
        i = self._index.get(run_id)
        if i is None:
            return None
        return {k: plain(v[0]) for k, v in self.table.slice(i, 1).to_pydict().items()}

    def iter_rows(self, batch: int = 512) -> Iterator[dict[str, Any]]:
        """Every run's row in table order, as `row` gives it, converted a batch at a time (not the whole table)."""
        for chunk in self.table.to_batches(max_chunksize=batch):
            for r in chunk.to_pylist():
                yield {k: plain(v) for k, v in r.items()}

    def query(self, q: Query) -> dict[str, Any]:
        """One page of the filtered, sorted table (shown columns only) and the total it came from."""
        t = self.table
        mask = None
        for col, value in q.filters:
            m = pc.is_null(t.column(col)) if value is None else pc.fill_null(pc.equal(t.column(col), value), False)
            mask = m if mask is None else pc.and_(mask, m)
        if mask is not None:
            t = t.filter(mask)
        if q.sort:
            order = pc.sort_indices(t, sort_keys=[(q.sort, "descending" if q.desc else "ascending", "at_end")])
            idx = order.slice(q.page * q.size, q.size)
            page = t.select(SHOWN).take(idx)
        else:
            page = t.select(SHOWN).slice(q.page * q.size, q.size)
        data = page.to_pydict()
        rows = [{c: plain(data[c][i]) for c in SHOWN} for i in range(len(page))]
        return {"total": len(t), "runs": len(self.table), "page": q.page, "size": q.size, "rows": rows,
                "columns": SHOWN}

    def facets(self) -> dict[str, list[list[Any]]]:
        """Per filter column, its values with their run counts (sorted by value, null last)."""
        out = {}
        for col in FACETS:
            counts = pc.value_counts(self.table.column(col)).to_pylist()
            pairs = [[plain(c["values"]), c["counts"]] for c in counts]
            out[col] = sorted(pairs, key=lambda p: (p[0] is None, str(p[0]) if not isinstance(p[0], (int, float)) else "",
                                                    p[0] if isinstance(p[0], (int, float)) else 0))
        return out

    def columnar(self, columns: list[str]) -> dict[str, list[Any]]:
        """Whole columns as lists (the static bundle's local query engine filters these)."""
        data = self.table.select(columns).to_pydict()
        return {c: [plain(v) for v in data[c]] for c in columns}


def _empty_schema() -> pa.Schema:
    types = {"str": pa.string(), "json": pa.string(), "int": pa.int64(), "float": pa.float64(), "bool": pa.bool_()}
    return pa.schema([(c.name, types[c.type.rstrip("?")]) for c in SCHEMA.values()])
