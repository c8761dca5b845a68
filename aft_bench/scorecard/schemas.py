"""An example call's arguments against a live server's input schema, checked without giving the server a chance
to hang the check: its regular expressions are left out, and a `{before.N...}` placeholder stands for a value of
its property's type (it is filled at run time)."""

from __future__ import annotations

from typing import Any

from aft_bench.scorecard.answers import PLACEHOLDER
from aft_bench.world.draft import SAMPLE


def unplaced(args: Any, schema: Any) -> Any:
    """Arguments with each `{before.N...}` placeholder left out of the schema check (its value comes at run time;
    the property stays present, as a value of its declared type where the schema gives one)."""
    if not isinstance(args, dict):
        return args
    props = (schema or {}).get("properties") or {} if isinstance(schema, dict) else {}
    return {k: (SAMPLE.get(str((props.get(k) or {}).get("type")), v) if isinstance(v, str) and PLACEHOLDER.match(v)
                else v) for k, v in args.items()}


def without_patterns(schema: Any) -> Any:
    """A server's schema without its regular expressions (`pattern`, `patternProperties`): matching a text against
    a server's regex is a server's chance to hang the check (a pattern that backtracks without end)."""
    if isinstance(schema, dict):
        return {k: without_patterns(v) for k, v in schema.items() if k not in ("pattern", "patternProperties")}
    if isinstance(schema, list):
        return [without_patterns(v) for v in schema]
    return schema


def refusal(args: Any, schema: Any) -> str | None:
    """Why `schema` refuses `args` ("refuses it: ..." or "cannot be checked against (...)"), or None."""
    import jsonschema
    from referencing.exceptions import Unresolvable

    if not isinstance(schema, dict):  # a server's inputSchema that is no JSON Schema object
        return f"cannot be checked against (its input schema is a {type(schema).__name__}, not an object)"
    checked = without_patterns(schema)
    try:
        jsonschema.validate(unplaced(args, checked), checked)
    except jsonschema.ValidationError as exc:
        return f"refuses it: {exc.message}"
    except (jsonschema.SchemaError, RecursionError, Unresolvable) as exc:  # a $ref that loops or leads nowhere
        return f"cannot be checked against ({type(exc).__name__})"
    return None
