"""A log file for a child process's output that passes through the redaction choke point: the child writes to a
pipe, a thread writes each line redacted (and flushed, so the log can be watched) into the file."""

from __future__ import annotations

import os
import threading
from pathlib import Path

from aft_bench.common.secrets import redact


class RedactedLog:
    """`fd` is the pipe's write end to hand to `subprocess.Popen`; call `handed()` once the child has it (the
    parent's copy closes, so the log ends when the child does) and `close()` to wait for the last line."""

    def __init__(self, path: Path) -> None:
        self.path = path
        read, self.fd = os.pipe()
        self._file = open(path, "w", encoding="utf-8")  # noqa: SIM115 - owned by the drain thread
        self._thread = threading.Thread(target=self._drain, args=(read,), name=f"log {path.name}", daemon=True)
        self._thread.start()

    def _drain(self, read: int) -> None:
        with os.fdopen(read, "r", encoding="utf-8", errors="replace") as pipe, self._file:
            for line in pipe:
                self._file.write(redact(line))
                self._file.flush()

    def handed(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def close(self, timeout_s: float = 2.0) -> None:
        """Wait for the last line (a grandchild still holding the pipe is not waited for longer)."""
        self.handed()
        self._thread.join(timeout_s)
