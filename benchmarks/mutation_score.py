"""Summarize the last `mutmut run` (see `make mutants`): killed, survived and untested mutants, overall and
per module, and the kill rate the README quotes.

    .venv/bin/python benchmarks/mutation_score.py
"""

from __future__ import annotations

import collections
import re
import subprocess
import sys
from pathlib import Path


def main() -> None:
    exe = Path(sys.executable).with_name("mutmut")
    out = subprocess.run([str(exe), "results", "--all", "true"], capture_output=True, text=True, check=True).stdout
    status: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for line in out.splitlines():
        m = re.match(r"\s*(aft_bench\.[\w.]+?)\.(?:x_|xǁ)\S*__mutmut_\d+: (\w[\w ]*)$", line.strip())
        if m:
            status[m.group(1)][m.group(2)] += 1
    total = collections.Counter()
    for module in sorted(status):
        c = status[module]
        total.update(c)
        print(f"{module:<40} killed {c['killed']:>4}  survived {c['survived']:>4}  other {sum(c.values()) - c['killed'] - c['survived']:>3}")
    n = sum(total.values())
    print(f"{'all':<40} killed {total['killed']:>4}  survived {total['survived']:>4}  of {n}: "
          f"kill rate {total['killed'] / max(n, 1):.1%}")


if __name__ == "__main__":
    main()
