"""Memory short under an address-space limit (`ulimit -v`, RLIMIT_AS): said in one line, never a hang.

Python reports a failed allocation as MemoryError, but one library does not: the OpenBLAS that scipy bundles
(0.3.30 in scipy 1.17) allocates a 32 MB buffer per thread while its shared library is being loaded, and when
that allocation fails it retries forever (OpenBLAS issue 5289; 0.3.31, in numpy, gives up after 10 retries and
exits). `aft-bench analyze` under `ulimit -v 500000` spun at 100 % CPU inside `import scipy.special._ufuncs`
until killed; Arrow's parquet reader waited forever when a worker thread could not start. So before scipy's
compiled modules are first loaded (`ensure_scipy_room`) and before the first parquet read (`ensure_arrow_room`),
a mapping of what that takes is tried and removed, and MemoryError names the shortfall if it does not fit; `main`
says any MemoryError as one line, exit 1."""

from __future__ import annotations

import mmap
import os
import resource
import sys

MB = 1024 * 1024
# What loading scipy's compiled modules adds to the address space, measured with numpy, pandas and pyarrow loaded:
# 74 MB with one OpenBLAS thread, 114 MB with two (each thread's 32 MB buffer and 8 MB stack); a margin on top.
SCIPY_BASE = 112 * MB
PER_BLAS_THREAD = 48 * MB
# What the first parquet read adds (system allocator, smoke results, 2 cores): 235 MB, for 3 worker threads of
# about 72 MB each (an 8 MB stack and a 64 MB malloc arena); a margin on top.
ARROW_BASE = 64 * MB
PER_ARROW_THREAD = 80 * MB


def under_limit() -> None:
    """Under an address-space limit, before pyarrow is first imported: Arrow's default allocator, mimalloc, reserves
    up to 1 GiB of address space at its first allocation (never touched, but counted against the limit), so it
    took most of any limit under 2 GB and what failed next depended on the limit (measured with the smoke results:
    analyze passed at 1.0 and 1.2 GB, failed at 0.8 and 1.6 GB). The system allocator reserves only what is used:
    analyze then passes at 0.8 GB and above. An ARROW_DEFAULT_MEMORY_POOL already set is left as it is."""
    if limit() is not None and "pyarrow" not in sys.modules:
        os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "system")


def limit() -> int | None:
    """The soft address-space limit in bytes, or None when there is none."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_AS)
    return None if soft == resource.RLIM_INFINITY else soft


def _in_use() -> int | None:
    """This process's address space now (VmSize), or None where /proc does not say."""
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as fh:
            for line in fh:
                if line.startswith("VmSize:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return None


def left() -> int | None:
    """Bytes of address space left under the limit (None: no limit)."""
    cap = limit()
    if cap is None:
        return None
    used = _in_use()
    return max(0, cap - used) if used is not None else None


def _fits(nbytes: int) -> bool:
    """Whether `nbytes` more of address space can be mapped now (a mapping made and removed, never touched)."""
    try:
        probe = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, prot=mmap.PROT_READ)
    except (OSError, MemoryError, ValueError):
        return False
    probe.close()
    return True


def blas_threads() -> int:
    """The threads OpenBLAS starts when loaded: OPENBLAS_NUM_THREADS (or its aliases), else one per core."""
    for name in ("OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS"):
        value = os.environ.get(name, "").strip()
        if value.isdigit() and int(value) > 0:
            return int(value)
    return os.cpu_count() or 1


def short(what: str, needed: int) -> str:
    """The one line's text: what could not be done, with how much of the address space is left under the limit."""
    cap, free = limit(), left()
    room = (f"{free / MB:.0f} MB of address space left under the limit of {cap / MB:.0f} MB" if cap and free is not None
            else f"under the address-space limit of {cap / MB:.0f} MB" if cap else "")
    return (f"memory is short: {what} needs about {needed / MB:.0f} MB{f', {room}' if room else ''}; raise the limit "
            f"(ulimit -v) or free memory")


def ensure_scipy_room() -> None:
    """Before scipy's compiled modules are first imported: MemoryError when the address space left under RLIMIT_AS
    cannot hold them and OpenBLAS's thread buffers (its load would spin forever instead of failing)."""
    if "scipy.special._ufuncs" in sys.modules or limit() is None:
        return
    needed = SCIPY_BASE + PER_BLAS_THREAD * max(0, blas_threads() - 1)
    if not _fits(needed):
        raise MemoryError(short("loading scipy (and the OpenBLAS it bundles)", needed))


_ARROW_STARTED = False


def ensure_arrow_room(what: str) -> None:
    """Before the first parquet table is read or written in this process: MemoryError when the address space left
    under RLIMIT_AS cannot hold the worker threads Arrow starts then (a stack and a malloc arena each). When one
    cannot start, Arrow's dataset reader waits forever on its result (measured: `analyze` hung at 350 MB), or a
    worker's std::bad_alloc ends the process with `terminate called` (at 500 MB)."""
    global _ARROW_STARTED
    if _ARROW_STARTED or limit() is None:
        return
    needed = ARROW_BASE + PER_ARROW_THREAD * ((os.cpu_count() or 1) + 1)
    if not _fits(needed):
        raise MemoryError(short(what, needed))
    _ARROW_STARTED = True


EXHAUSTED = 32 * MB  # less address space than this left under the limit: whatever failed, memory is short


def failed_load(exc: BaseException) -> bool:
    """Whether `exc` is memory running out where no MemoryError is raised: the dynamic loader failing to map a
    compiled module, a library's worker thread (its stack) that could not be started under a limit, or any error
    raised with the address space all but used up (an import failing inside CPython as a SystemError)."""
    text = str(exc)
    if isinstance(exc, ImportError) and ("failed to map segment" in text or "Cannot allocate memory" in text):
        return True
    if limit() is None:
        return False
    free = left()
    return "Failed to launch worker thread" in text or "can't start new thread" in text or (
        free is not None and free < EXHAUSTED)


def describe(exc: BaseException) -> str:
    """The one line's text for a MemoryError (or a compiled module the loader could not map): what failed, with
    the address space left under the limit when there is one."""
    said = " ".join(str(exc).split())
    if said.startswith("memory is short"):
        return said
    cap, free = limit(), left()
    room = (f" ({free / MB:.0f} MB of address space left under the limit of {cap / MB:.0f} MB)"
            if cap and free is not None else f" (under the address-space limit of {cap / MB:.0f} MB)" if cap else "")
    what = f"{type(exc).__name__}: {said[:200]}" if said else type(exc).__name__
    return f"memory is short: an allocation failed{room}: {what}; raise the limit (ulimit -v) or free memory"
