"""The `aft-bench` command line: argument parsing and one function per command.

May import: anything in aft_bench.
"""

from aft_bench.cli.main import main

__all__ = ["main"]
