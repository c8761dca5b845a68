"""The echo server (echo_mcp.py) as a function, for tests of the forked launcher: with the command
`python echo_mcp.py ARG...` as its sys.argv, `forkable_echo:main` runs that script as a fresh server would."""

import runpy
import sys


def main() -> None:
    sys.argv = sys.argv[1:]
    runpy.run_path(sys.argv[0], run_name="__main__")
