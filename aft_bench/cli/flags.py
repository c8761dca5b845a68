"""Flag types with their ranges, and a parser whose errors are one line: a bad value never reaches a command
(an infinite timeout, a NaN ceiling, zero resamples, a port out of range) and never prints a usage block."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from typing import NoReturn

SEED_MAX = 2**63 - 1  # seeds are recorded in int64 columns


def integer(lo: int, hi: int) -> Callable[[str], int]:
    """An integer flag in [lo, hi]."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if not lo <= value <= hi:
            raise argparse.ArgumentTypeError(f"{value} is outside {lo}..{hi}")
        return value

    parse.__name__ = "integer"
    return parse


def number(lo: float, hi: float, lo_open: bool = False) -> Callable[[str], float]:
    """A finite number flag in [lo, hi] (or (lo, hi] when `lo_open`)."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not math.isfinite(value) or value > hi or value < lo or (lo_open and value == lo):
            raise argparse.ArgumentTypeError(f"{text} is outside {'(' if lo_open else '['}{lo:g}, {hi:g}]")
        return value

    parse.__name__ = "number"
    return parse


SEED = integer(0, SEED_MAX)
PORT = integer(0, 65535)
COUNT = integer(1, 10_000_000)


class FlagError(Exception):
    """A bad command line, as one line naming the command and the flag (the CLI prints it and exits 2)."""


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a bad flag is one line naming it (`aft-bench: error: ...`), exit 2, no usage block."""

    def error(self, message: str) -> NoReturn:
        raise FlagError(f"{self.prog.removeprefix('aft-bench ')}: {' '.join(message.split())}")


def executor(args: argparse.Namespace) -> str | None:
    """The Dask scheduler address `run` or `atlas` uses (None: this machine's executors); the extra must be
    installed."""
    from aft_bench.common.errors import InputError
    from aft_bench.experiment.cluster import missing_extra

    if args.executor != "dask":
        if args.scheduler is not None:
            raise InputError("--scheduler", "--scheduler", args.scheduler, "is only used with --executor dask")
        return None
    problem = missing_extra()
    if problem is not None:
        raise InputError("--executor", "--executor", "dask", problem)
    return args.scheduler or "local"


def scheduler_flag(text: str) -> str:
    """`--scheduler`: tcp://host:port or local[:N], checked before anything runs."""
    from aft_bench.experiment.cluster import parse

    try:
        return str(parse(text))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
