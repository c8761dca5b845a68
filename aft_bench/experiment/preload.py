"""Imported once by the forkserver that starts worker processes: load the package and the tokenizer there
(about 0.5 s), so that every worker forks with them loaded instead of loading them itself. The server is a
fresh single-threaded process (loading the tokenizer starts no thread), so forking from it stays safe."""

from aft_bench.common.lifetime import die_with_parent
from aft_bench.experiment import executors  # noqa: F401 - the modules every worker needs
from aft_bench.interface import tokens

die_with_parent()  # the forkserver ends with the runner that started it, even when that one was SIGKILLed

tokens.warm()
