"""Named crash points for the crash tests: `AFT_BENCH_KILL_AT=<point>:<n>` makes the process SIGKILL itself
the n-th time it reaches <point> (n counts from 1); `<point>:<n>:TERM` (or `INT`) sends that signal instead, as
`timeout` or Ctrl-C would at that moment. Unset, `hit` is a dictionary lookup and nothing else.

Points: `before_commit`, `after_commit` (pipeline, around the backend's commit), `before_seal` (runner,
after the run's response and labels but before its trace is sealed and flushed), `mid_row` (journal: half a
row line written), `after_row` (journal: the row line durable), `bundle_item` (`view --bundle`: a run or pair
page written), `folder_made` (an atomic folder write: its temporary folder just made), `after_server_answer` (an external world's gateway: a real server answered, its process running), `atlas_cell` (an atlas: a cell's record just written).
"""

from __future__ import annotations

import os
import signal

_SPEC = os.environ.get("AFT_BENCH_KILL_AT", "")
_POINT, _, _REST = _SPEC.partition(":")
_N, _, _SIGNAL = _REST.partition(":")
_COUNT = {"n": 0}


def armed(point: str) -> bool:
    return bool(_SPEC) and point == _POINT


def hit(point: str) -> None:
    """Signal this process (SIGKILL unless the spec names another) if `point` is the armed point and this is its
    n-th arrival."""
    if not _SPEC or point != _POINT:
        return
    _COUNT["n"] += 1
    if _COUNT["n"] == int(_N or 1):
        os.kill(os.getpid(), getattr(signal, f"SIG{_SIGNAL or 'KILL'}"))
