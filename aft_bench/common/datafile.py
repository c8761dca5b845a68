"""Loading TOML data files into pydantic models, turning validation failures into InputError."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from aft_bench.common.errors import FieldProblem, InputError
from aft_bench.common.files import check_data, read_text

M = TypeVar("M", bound=BaseModel)


def read_toml(path: Path) -> dict[str, Any]:
    """Parse a TOML data file; any file-system, encoding, syntax, size or nesting problem is an InputError
    naming the file (and the field, for an over-long string)."""
    text = read_text(path)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InputError(path, "<syntax>", str(exc), "not valid TOML") from None
    except RecursionError:
        raise InputError(path, "<syntax>", "nesting", "not valid TOML: nested too deeply") from None
    check_data(data, path)
    return data


def validate(model: type[M], data: Any, path: Path, prefix: str = "") -> M:
    """Validate `data` as `model`; the first error becomes an InputError with a dotted field path."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = [str(p) for p in err["loc"] if p != "__root__"]
        value = "<missing>" if err["type"] == "missing" else err.get("input")
        problem = err["msg"]
        cause = (err.get("ctx") or {}).get("error")
        if isinstance(cause, FieldProblem):
            loc, value, problem = loc + [cause.field], cause.value, cause.problem
        field = ".".join(p for p in (prefix, *loc) if p) or "<root>"
        raise InputError(path, field, value, problem) from None
