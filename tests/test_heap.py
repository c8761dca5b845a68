"""The run's loaded objects leave the cyclic collector's reach once per process (gc.freeze), and only once."""

from __future__ import annotations

import subprocess
import sys


def test_settle_freezes_what_is_alive_once_and_later_calls_leave_new_objects_collectable() -> None:
    script = """
import gc
from aft_bench.common.heap import settle
assert gc.get_freeze_count() == 0
settle()
frozen = gc.get_freeze_count()
assert frozen > 1000, frozen  # the interpreter's and the package's objects
garbage = [[] for _ in range(5000)]
for a, b in zip(garbage[::2], garbage[1::2]):
    a.append(b); b.append(a)  # cycles only the collector can free
settle()
assert gc.get_freeze_count() == frozen  # the second call froze nothing more
del garbage, a, b
assert gc.collect() >= 5000  # so the cycles made after the first call are still collected
print("ok")
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=False)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr
