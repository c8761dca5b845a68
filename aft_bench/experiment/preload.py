"""Imported once by the forkserver that starts worker processes: load the package and the tokenizer there
(about 3 s), so that every worker forks with them loaded instead of loading them itself. The server is a
fresh single-threaded process (loading the tokenizer starts no thread), so forking from it stays safe."""

from aft_bench.experiment import executors  # noqa: F401 - the modules every worker needs
from aft_bench.interface import tokens

tokens.warm()
