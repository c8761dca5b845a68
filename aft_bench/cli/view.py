"""`aft-bench view DIR`: the results viewer, served on 127.0.0.1 (Ctrl-C stops it) or written as a static
bundle with `--bundle OUT`. Reads DIR; writes nothing into it."""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path
from typing import Any

from aft_bench.cli.flags import PORT

VIEW_PORT = 8600  # report.html's links to pairs (analysis.report.VIEW_URL) expect it here


def _interrupt(signum: int, frame: Any) -> None:
    """A termination signal as Ctrl-C: unwinds through the atomic folder write, which removes its temp folder."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    raise KeyboardInterrupt


def cmd_view(args: argparse.Namespace) -> int:
    from aft_bench.viewer.model import Viewer

    directory = Path(args.dir)
    if args.bundle is not None:
        from aft_bench.common.errors import InputError

        out = Path(args.bundle)
        if out.exists() or out.is_symlink():  # before reading DIR: nothing is built for a refused target
            raise InputError(out, "--bundle", str(out), "already exists; give a new folder")
        from aft_bench.experiment.progress import progress_for
        from aft_bench.viewer.bundle import write_bundle

        # SIGTERM (`timeout`, a CI runner) and Ctrl-C end the bundle alike: the half-written temporary folder is
        # removed and OUT never appears; a second signal while that happens is ignored so the cleanup finishes.
        # SIGINT is handled here too: a process started with SIGINT ignored (a test runner's worker, a background
        # job) would otherwise not stop on it at all
        previous = {s: signal.signal(s, _interrupt) for s in (signal.SIGTERM, signal.SIGINT)}
        try:
            counts = write_bundle(Viewer(directory), out, progress=progress_for)
        except KeyboardInterrupt:
            print(f"aft-bench: view: interrupted; {out} was not written and nothing was left beside it",
                  file=sys.stderr)
            return 130
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)
        print(f"bundle: {out / 'index.html'} ({counts['runs']} runs, {counts['pairs']} pairs); opens from disk")
        return 0
    from aft_bench.common.net import listen
    from aft_bench.viewer.server import serve

    viewer = Viewer(directory)  # a bad directory is refused before the port is taken
    sock = listen(args.host, args.port)
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    status = viewer.status()
    print(f"aft-bench view: {status['runs']} runs of {directory} on http://{shown}:{port}/ ; Ctrl-C stops it",
          flush=True)
    for note in status["notes"]:
        print(f"  note: {note}", file=sys.stderr, flush=True)
    serve(viewer, sock)
    return 0


def add_parsers(sub: Any) -> None:
    """The `view` command."""
    v = sub.add_parser("view", help="browse a results directory (runs, matched pairs, traces) in a web browser; "
                       "--bundle writes it as a static site")
    v.add_argument("dir", help="results directory")
    v.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine only)")
    v.add_argument("--port", type=PORT, default=VIEW_PORT, help=f"port (default {VIEW_PORT}, the port report.html "
                   "links to; 0: any free port, printed)")
    v.add_argument("--bundle", metavar="OUT", help="write a static site into the new folder OUT instead of serving")
    v.set_defaults(func=cmd_view)
