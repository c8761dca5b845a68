"""Reading input files so that every file-system or decoding problem is one InputError naming the file:
missing, a directory, unreadable, a symlink loop, too large, not UTF-8, nested too deeply, strings too long."""

from __future__ import annotations

import errno
import json
import os
import shutil
import stat
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from aft_bench.common import crashpoints
from aft_bench.common.errors import InputError, OutputError
from aft_bench.common.secrets import redact

MAX_FILE_BYTES = 64 * 1024 * 1024  # no data file, journal or manifest of a real experiment comes near this
MAX_STRING = 64 * 1024  # characters in one string field of a data file (task specs are < 1 KiB)
MAX_DEPTH = 64  # nesting of tables/arrays in a data file (ours use at most 5)


def _os_problem(exc: OSError) -> str:
    if isinstance(exc, FileNotFoundError):
        return "file not found"
    if isinstance(exc, IsADirectoryError):
        return "is a directory, not a file"
    if isinstance(exc, PermissionError):
        return "not readable (permission denied)"
    if exc.errno == errno.ELOOP:
        return "symbolic link loop"
    if exc.errno == errno.ENOTDIR:
        return "a parent of this path is not a directory"
    return f"cannot read: {exc.strerror or exc}"


def special_file(path: Path) -> str | None:
    """What `path` is if it is a FIFO or a socket where a file should be: opening one blocks until a peer
    appears, so callers refuse it; None otherwise (a device such as /dev/full is left to fail as it fails)."""
    try:
        mode = path.stat().st_mode
    except OSError:
        return None
    for test, name in ((stat.S_ISFIFO, "a named pipe (FIFO)"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return None


def refuse_special(folder: Path, subfolders: tuple[str, ...] = ("traces", "db")) -> None:
    """InputError naming the first FIFO or socket in a results folder (or its `subfolders`), before anything
    opens it."""
    for where in (folder, *(folder / s for s in subfolders)):
        try:
            entries = list(os.scandir(where))
        except OSError:
            continue
        for entry in entries:
            kind = special_file(Path(entry.path))
            if kind is not None:
                raise InputError(entry.path, "<file>", entry.name, f"is {kind}, not a file aft-bench wrote")


READ_CHUNK = 1024 * 1024


def _read_up_to(fh: Any, n: int) -> bytes:
    """At most `n` bytes of `fh`, read a chunk at a time: `fh.read(n)` allocates all `n` bytes up front, so every
    small manifest would reserve the whole size limit (a MemoryError under an address-space limit)."""
    chunks: list[bytes] = []
    left = n
    while left > 0:
        chunk = fh.read(min(READ_CHUNK, left))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def read_bytes(path: Path, limit: int = MAX_FILE_BYTES) -> bytes:
    """The file's bytes; any OS problem or a file over `limit` bytes is an InputError naming it."""
    if (kind := special_file(path)) is not None:
        raise InputError(path, "<file>", str(path), f"is {kind}, not a file")
    try:
        with open(path, "rb") as fh:
            data = _read_up_to(fh, limit + 1)
    except OSError as exc:
        raise InputError(path, "<file>", str(path), _os_problem(exc)) from None
    if len(data) > limit:
        raise InputError(path, "<file>", str(path), f"larger than {limit // (1024 * 1024)} MiB")
    return data


def read_text(path: Path, limit: int = MAX_FILE_BYTES) -> str:
    """The file as strict UTF-8 text (a byte-order mark or any other encoding is refused, naming the byte)."""
    data = read_bytes(path, limit)
    if data.startswith((b"\xef\xbb\xbf", b"\xff\xfe", b"\xfe\xff")):
        raise InputError(path, "<encoding>", data[:3].hex(), "starts with a byte-order mark; save it as UTF-8 "
                         "without BOM")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(path, "<encoding>", f"byte {exc.start}", "not UTF-8 text") from None


def read_json(path: Path, what: str = "JSON document") -> Any:
    """A JSON file (a manifest, a lock, an analysis table); malformed or truncated is an InputError."""
    text = read_text(path)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(path, "<syntax>", f"line {exc.lineno} column {exc.colno}",
                         f"not a valid {what} (truncated or edited?)") from None
    except RecursionError:
        raise InputError(path, "<syntax>", "nesting", f"not a valid {what}: nested too deeply") from None
    return data


def check_data(data: Any, path: Path, max_string: int = MAX_STRING, max_depth: int = MAX_DEPTH) -> None:
    """Refuse a parsed data file whose strings are longer than `max_string` or whose nesting is deeper than
    `max_depth`, naming the field (iterative: never itself the victim of deep nesting)."""
    stack: list[tuple[Any, str, int]] = [(data, "", 0)]
    while stack:
        value, where, depth = stack.pop()
        if depth > max_depth:
            raise InputError(path, where or "<root>", "...", f"nested more than {max_depth} levels deep")
        if isinstance(value, str):
            if len(value) > max_string:
                raise InputError(path, where or "<root>", value[:40] + "...",
                                 f"string of {len(value)} characters; the limit is {max_string}")
        elif isinstance(value, dict):
            stack.extend((v, f"{where}.{k}" if where else str(k), depth + 1) for k, v in value.items())
        elif isinstance(value, list):
            stack.extend((v, f"{where}.{i}" if where else str(i), depth + 1) for i, v in enumerate(value))


def input_dir(path: Path, flag: str) -> Path:
    """A folder given on the command line that must exist."""
    if not path.exists():
        raise InputError(path, flag, str(path), "no such folder")
    if not path.is_dir():
        raise InputError(path, flag, str(path), "is a file, not a folder")
    return path


def write_atomic(path: Path, text: str, *, redacted: bool = False) -> None:
    """Write evidence `text` to `path`, redacted and atomically: a temp file beside it, fsync'd, then renamed over
    `path`, so a crash leaves the old file or the new one, never half of either (`*.tmp` is a leftover to heal).
    `redacted`: JSON whose every string was redacted already (`secrets.redact_value`), written as it is: redacting
    its text again could replace a `false` that a secret's value happens to equal, and break its shape."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(text if redacted else redact(text))
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except OSError as exc:  # a full disk names no file: this one is the file that could not be written
        try:
            tmp.unlink()
        except OSError:
            pass
        raise OutputError(path, exc) from None


def write_folder(final: Path, fill: Callable[[Path], None]) -> None:
    """Create folder `final` atomically: `fill` writes into a temp folder beside it, which replaces `final`
    only when `fill` succeeded; on any failure the previous `final` (or its absence) is left untouched."""
    # the name first, the folder inside the try: a signal raised as an exception (view --bundle's SIGTERM) right after
    # the folder appears is cleaned up like any other failure (mkdtemp before the try left a window, seen under load)
    tmp = final.parent / f".{final.name}-{uuid.uuid4().hex}"  # 128 random bits: never an existing folder
    try:
        try:
            tmp.mkdir(mode=0o700)
        except OSError as exc:
            raise OutputError(final, exc) from None
        crashpoints.hit("folder_made")  # a signal the moment the temporary folder exists (the crash tests)
        try:
            fill(tmp)
        except OSError as exc:  # a full disk mid-fill: name what was being written (the final path), not "?"
            name = Path(exc.filename) if isinstance(exc.filename, str) else None
            inside = name is not None and name.is_relative_to(tmp)
            raise OutputError(final / name.relative_to(tmp) if inside else final, exc) from None
        old = final.with_name(f".{final.name}-old")
        if old.exists():  # left by an interrupted earlier write: the last complete version if `final` is gone
            if final.exists():
                shutil.rmtree(old)
            else:
                os.replace(old, final)
        if final.exists():
            os.replace(final, old)
        os.replace(tmp, final)
        shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
