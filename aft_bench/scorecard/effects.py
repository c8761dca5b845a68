"""What init-world and the atlas measure before any example exists: each tool that needs no arguments called once
with none on a fresh server and folder, and whether that changed the state (the probe's diff), so a draft says
measured, not guessed, where it can."""

from __future__ import annotations

from typing import Any

from aft_bench.runtime.gateway import Gateway, WorldFailed
from aft_bench.runtime.trace import Trace
from aft_bench.world import snapshot


def wrote(s0: dict[str, Any], s1: dict[str, Any]) -> bool:
    """Whether a call changed the state beyond creating an empty store (a server that makes its empty todo.txt or
    database file at first use has not written by listing it)."""
    for coll, d in snapshot.diff(s0, s1).items():
        if d["removed"] or d["changed"]:
            return True
        recs = snapshot.records(s1, coll)
        if any(recs[k].get("size") != 0 for k in d["added"]):
            return True
    return False


MEASURE_MAX = 40  # tools init-world calls with no arguments to measure their effect (the rest: guessed)
MEASURE_LISTED_MAX = 500  # a server listing more is drafted without measuring any (each start checks them all)


def measure_effects(world: Any, listed: list[dict[str, Any]]) -> dict[str, bool]:
    """Each tool that needs no arguments, called once with none on a fresh server and folder: did it change the
    state (the probe's diff)? A tool whose call fails or whose server breaks is left unmeasured."""
    out: dict[str, bool] = {}
    if len(listed) > MEASURE_LISTED_MAX:  # each episode would check thousands of tools: draft, measure none
        return out
    tried = 0
    for tool in listed:
        name = str(tool.get("name"))
        schema = tool.get("inputSchema") if isinstance(tool.get("inputSchema"), dict) else {}
        if schema.get("required") or name not in world.tools:
            continue
        tried += 1
        if tried > MEASURE_MAX:  # each is a fresh server: a server listing thousands would keep init-world for hours
            break
        gw = Gateway(world, Trace())
        try:
            gw.open()
            d = gw.invoke(name, {})
            if d.answer is None or d.answer.is_error:
                continue
            out[name] = wrote(gw.s0, gw.final_state())
        except WorldFailed:
            continue
        finally:
            gw.close()
    return out
