"""`python -m aft_bench.cli`: the same as the `aft-bench` command."""

import sys

from aft_bench.cli.main import main

sys.exit(main())
