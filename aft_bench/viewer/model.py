"""Everything the pages show, as JSON-ready data, from one results directory: the server answers its API with
these and the bundle writes them to files. Opened once; reopened when the directory's content key changes."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from aft_bench.common.cache import BoundedCache
from aft_bench.common.files import read_json
from aft_bench.viewer import evidence, pairs, timeline
from aft_bench.viewer.runs import FACETS, Query, RunsTable
from aft_bench.viewer.source import Source, changed, journal_tail, open_source
from aft_bench.viewer.world_state import state_diff, task_context

TABLES = ("comparisons", "primary", "secondary", "per_model", "lomo", "discovery", "trials")
MANIFEST_FIELDS = ("config_path", "config_hash", "lock_hash", "code", "packages", "python", "platform", "tokenizer",
                   "runs", "conditions_hash", "experiment", "worlds_dir")


class Viewer:
    """The viewer's data over `directory`, held in memory (runs table, pairs) with traces read on demand."""

    def __init__(self, directory: Path, trace_cache: int = 64) -> None:
        self.directory = directory
        self._lock = threading.Lock()
        self._traces: BoundedCache[str, dict[str, Any]] = BoundedCache(trace_cache)
        self._open()

    def _open(self) -> None:
        self.source: Source = open_source(self.directory)
        self.runs = RunsTable.load(self.directory)
        self._pairs: tuple[list[dict[str, Any]], str] | None = None
        self._traces = BoundedCache(self._traces.maxsize)

    def refresh(self) -> bool:
        """Reload when the results changed on disk; True when it did."""
        with self._lock:
            if changed(self.source):
                self._open()
                return True
        return False

    # -- scorecards of real MCP servers (`aft-bench scorecard WORLD --out DIR/scorecards`) -----------------------
    def scorecards(self) -> dict[str, Any]:
        """Every scorecard in DIR/scorecards/, its rows as the command prints them, and for each world measured at
        two versions what changed; a file that is not a scorecard is named in the notes, never shown."""
        from aft_bench.scorecard.render import compare, rows

        cards, notes = [], []
        folder = self.directory / "scorecards"
        for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
            try:
                card = read_json(path, "aft-bench scorecard")
                shown = rows(card)
            except Exception as exc:  # noqa: BLE001 - any unreadable file is a note, not a broken page
                notes.append(f"{path.name}: not a scorecard ({str(exc).splitlines()[0][:160]})")
                continue
            cards.append({"file": path.name, "world": card["world"], "package": card["package"],
                          "version": card["version"], "server": card.get("server") or {},
                          "protocol": card.get("protocol"), "rows": shown, "untested": card.get("untested") or [],
                          "_card": card})
        changes = []
        by_world: dict[str, list[dict[str, Any]]] = {}
        for c in cards:
            by_world.setdefault(c["world"], []).append(c)
        for world, same in sorted(by_world.items()):
            for old, new in zip(same, same[1:]):
                changes.append({"world": world, "from": old["version"], "to": new["version"],
                                "lines": compare(old["_card"], new["_card"])})
        return {"cards": [{k: v for k, v in c.items() if k != "_card"} for c in cards], "changes": changes,
                "notes": notes}

    # -- experiment --------------------------------------------------------------------------------------------
    def pending(self) -> list[dict[str, Any]]:
        """Tuples of the matrix without a recorded run, each with its last recorded failure (if any)."""
        planned = self.source.manifest.get("run_ids") or []
        done = set(self.runs.ids())
        last: dict[Any, dict[str, Any]] = {}
        for rec in self.source.failures:
            last[rec.get("run_id")] = rec
        return [{"run_id": rid, **({k: v for k, v in last[rid].items() if k != "run_id"} if rid in last else
                                   {"error": None, "message": "not attempted yet"})}
                for rid in planned if rid not in done]

    def status(self) -> dict[str, Any]:
        lines, torn = journal_tail(self.directory)
        notes = list(self.source.notes)
        if torn:
            notes.append("journal.jsonl ends in a torn line (a run interrupted mid-write): that run is pending")
        if self.source.has_parquet and lines > len(self.runs):
            notes.append(f"journal.jsonl holds {lines} rows, results.parquet {len(self.runs)}: "
                         f"{lines - len(self.runs)} not compacted yet")
        traces = self.directory / "traces"
        if traces.is_dir():
            have = {p.stem for p in traces.glob("*.jsonl")}
            missing = [r for r in self.runs.ids() if r not in have]
            if missing:
                notes.append(f"{len(missing)} of {len(self.runs)} runs have no trace file (e.g. {missing[0]})")
        return {"directory": str(self.directory), "key": self.source.key, "runs": len(self.runs),
                "planned": len(self.source.manifest.get("run_ids") or []) or None, "notes": notes,
                "has_analysis": self.source.has_analysis}

    def experiment(self) -> dict[str, Any]:
        m = self.source.manifest
        tables: dict[str, Any] = {}
        stale = None
        if self.source.has_analysis:
            meta = read_json(self.directory / "analysis" / "meta.json", "analysis meta.json")
            tables["meta"] = meta
            for name in TABLES:
                p = self.directory / "analysis" / f"{name}.json"
                tables[name] = read_json(p, f"analysis {name}.json") if p.is_file() else None
            if self.source.has_parquet and isinstance(meta, dict):
                from aft_bench.analysis.table import results_sha256
                stale = meta.get("input_sha256") != results_sha256(self.directory)
        counts = {c: dict((str(v), n) for v, n in vals) for c, vals in self.runs.facets().items()
                  if c in ("workload", "condition", "outcome", "fault", "agent", "model", "backend")}
        pend = self.pending()
        figures = sorted(p.name for p in (self.directory / "report").glob("*.png")) if (self.directory / "report").is_dir() else []
        return {"manifest": {k: m.get(k) for k in MANIFEST_FIELDS if k in m}, "counts": counts,
                "runs": len(self.runs), "planned": len(m.get("run_ids") or []) or None,
                "pending": pend, "pending_count": len(pend),
                "failures": [f for f in self.source.failures if f.get("run_id") is None or f.get("run_id") not in set(self.runs.ids())],
                "sessions": self.source.sessions, "analysis": tables, "analysis_stale": stale, "figures": figures,
                "status": self.status()}

    # -- runs --------------------------------------------------------------------------------------------------
    def query(self, params: dict[str, str]) -> dict[str, Any]:
        return self.runs.query(Query.from_params(params))

    def facets(self) -> dict[str, Any]:
        return {"facets": self.runs.facets(), "order": FACETS}

    def run(self, run_id: str) -> dict[str, Any] | None:
        """A run's row and its trace as a timeline (verified when first opened; cached, bounded)."""
        row = self.runs.row(run_id)
        if row is None:
            return None
        return self._traces.get(run_id, lambda: self.build_run(row))

    def build_run(self, row: dict[str, Any]) -> dict[str, Any]:
        """The run page's data for a row of the runs table (its trace read and verified now, not cached)."""
        path = self.directory / "traces" / f"{row['run_id']}.jsonl"
        events, verdict = timeline.load(path, row.get("trace_head"))
        start = next((dict(e.data) for e in events if e.kind == "run_start"), {})
        final = timeline.terminal_state(events)
        ctx = task_context(self.source.manifest, row, start) if events else {"s0": None, "criteria": None,
                                                                                "note": "no trace"}
        setup, turns = timeline.turns(events)
        diff = state_diff(ctx["s0"], final) if ctx["s0"] is not None and final is not None else None
        return {"row": row, "verification": verdict, "events": [timeline.event_dict(e) for e in events],
                "setup": setup, "turns": turns, "invocations": timeline.invocations(events),
                "faults": timeline.faults(events),
                "labels": evidence.labels(events, row, final, ctx["criteria"]),
                "commit_reasons": {str(k): v for k, v in evidence.commit_reasons(events, final, ctx["criteria"]).items()},
                "state": {"terminal": final, "diff": diff, "note": ctx["note"]},
                "extras": timeline.extras(events, row)}

    # -- pairs -------------------------------------------------------------------------------------------------
    def all_pairs(self) -> tuple[list[dict[str, Any]], str]:
        if self._pairs is None:
            table = self.runs.table.to_pandas() if len(self.runs) else None
            self._pairs = pairs.all_pairs(self.directory, self.source.manifest, table)
        return self._pairs

    def pair_list(self, comparison: str | None = None) -> dict[str, Any]:
        items, where = self.all_pairs()
        comps = sorted({p["comparison"] for p in items})
        chosen = [p for p in items if comparison is None or p["comparison"] == comparison]
        return {"comparisons": comps, "pairs": chosen, "source": where}

    def pair(self, comparison: str, treatment_run: str) -> dict[str, Any] | None:
        items, where = self.all_pairs()
        p = next((x for x in items if x["comparison"] == comparison and treatment_run in
                  (x["run_id_treatment"], x["run_id_control"])), None)
        if p is None:
            return None
        t, c = self.run(p["run_id_treatment"]), self.run(p["run_id_control"])
        if t is None or c is None:
            return None
        return pair_page(p, where, t, c)


def pair_page(p: dict[str, Any], where: str, t: dict[str, Any], c: dict[str, Any]) -> dict[str, Any]:
    """A pair page's data from its analysis pair and its two runs (only their `row` and `turns` are read)."""
    return {"pair": p, "source": where, "labels": pairs.label_diff(t["row"], c["row"]),
            "alignment": pairs.align(t["turns"], c["turns"]),
            "treatment": p["run_id_treatment"], "control": p["run_id_control"]}
