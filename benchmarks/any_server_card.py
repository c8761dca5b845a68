"""From `init-world` to the first right scorecard on a server never seen, as the tutorial goes: the draft, the only
hand edit (example arguments, taken from tests/data/any_server/NAME.toml and written in by this script), `validate
--live`, `scorecard`; each step's wall time, the total, and whether every row agrees with the class recorded by
hand beside the direct measurement (tests/test_any_server.py checks that agreement too).

    .venv/bin/python benchmarks/any_server_card.py [NAME ...]      (default: every server in tests/data/any_server)

Needs `make test-servers`. The time a person takes to type the example arguments is not in the figures.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "any_server"
sys.path.insert(0, str(ROOT / "tests"))

from test_any_server import _finish  # noqa: E402  (the hand edit, the same as the test's)


def _step(args: list[str], cwd: Path) -> tuple[float, subprocess.CompletedProcess[str]]:
    t0 = time.perf_counter()
    done = subprocess.run([str(ROOT / ".venv" / "bin" / "aft-bench"), *args], capture_output=True, text=True,
                          cwd=cwd, timeout=600)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(args[:2])}: exit {done.returncode}: {done.stderr.strip()}")
    return time.perf_counter() - t0, done


def run(name: str) -> dict[str, object]:
    spec = tomllib.loads((DATA / f"{name}.toml").read_text())
    with tempfile.TemporaryDirectory(prefix="any-server-") as tmp:
        cwd = Path(tmp)
        folder = cwd / "worlds" / name
        t_init, _ = _step(["init-world", name, "--", *spec["command"]], cwd)
        draft = folder / "world.toml"
        draft.write_text(_finish(draft.read_text(), dict(spec["examples"])))
        t_live, _ = _step(["validate", "--live", str(folder)], cwd)
        t_card, done = _step(["scorecard", str(folder), "--json", "--quiet"], cwd)
    card = json.loads(done.stdout)
    got = {(t["tool"], t["example"]): next(o["cls"] for o in t["outcomes"] if o["treatment"] == "bare")
           for t in card["tools"]}
    right = sum(got.get((e["tool"], e.get("example", 0))) == e["class"] for e in spec["expect"])
    return {"server": f"{card['package']} {card['version']}", "init": t_init, "validate": t_live,
            "scorecard": t_card, "total": t_init + t_live + t_card, "rows": len(got),
            "right": f"{right}/{len(spec['expect'])}"}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("names", nargs="*", default=sorted(x.stem for x in DATA.glob("*.toml")))
    args = p.parse_args()
    print(f"{'server':<40} {'init-world':>10} {'validate':>9} {'scorecard':>10} {'total':>7} {'rows':>5} "
          f"{'right':>6}")
    for name in args.names:
        r = run(name)
        print(f"{r['server']:<40} {r['init']:>9.1f}s {r['validate']:>8.1f}s {r['scorecard']:>9.1f}s "
              f"{r['total']:>6.1f}s {r['rows']:>5} {r['right']:>6}")


if __name__ == "__main__":
    main()
