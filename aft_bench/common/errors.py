"""Error types. InputError is bad user input (exit 2); HarnessError is a bug or inconsistency in the harness."""

from __future__ import annotations

from pathlib import Path
from typing import Any


class InputError(Exception):
    """Bad input: names the file, the field and the offending value."""

    def __init__(self, path: str | Path, field: str, value: Any, problem: str) -> None:
        self.path = str(path)
        self.field = field
        self.value = value
        self.problem = problem
        shown = repr(value)
        if len(shown) > 160:
            shown = shown[:157] + "..."
        super().__init__(f"{self.path}: field '{field}': {problem} (got {shown})")


class FieldProblem(ValueError):
    """Raised inside model validators to name the exact sub-field and value at fault."""

    def __init__(self, field: str, value: Any, problem: str) -> None:
        self.field = field
        self.value = value
        self.problem = problem
        super().__init__(problem)


class HarnessError(Exception):
    """The harness found itself inconsistent (e.g. trace and backend disagree); never a benchmark outcome."""


class TraceIntegrityError(Exception):
    """A trace file was modified, reordered or truncated."""


class OutputError(Exception):
    """Results could not be written (full disk, read-only or missing directory); earlier results are intact."""

    def __init__(self, path: object, exc: OSError) -> None:
        self.path = str(path)
        super().__init__(f"cannot write {self.path}: {exc.strerror or exc}; results recorded earlier are intact")


class EvidenceError(Exception):
    """Recorded evidence of finished runs (a trace, a database) is missing or fails verification."""


class CeilingReached(Exception):
    """The experiment's spend ceiling stopped new tuples; everything recorded is intact (exit 3)."""


class WorldFailed(Exception):
    """An external world failed during an episode (server, fixture or probe): the tuple stays pending. `field`
    names the world file's field that failed (`server`, `probe.sqlite`, `fixture.commands`, ...)."""

    def __init__(self, message: str, field: str = "server") -> None:
        super().__init__(message)
        self.field = field
