"""`aft-bench atlas`: the scorecard of many real MCP servers at many releases, measured the same way. Each release is
installed once into a cache of its own, drafted as a world from its live tools with the atlas entry's example calls,
and scored; a cell that cannot be measured is recorded as untestable with its reason. What people consume is built
from the recorded cells: the dataset, the drift between releases, SARIF, badges and annotation evidence.

May import: aft_bench.common, aft_bench.world, aft_bench.runtime, aft_bench.experiment, aft_bench.scorecard.
"""
