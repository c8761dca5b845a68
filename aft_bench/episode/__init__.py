"""One episode: reset the world, open the trace, run the one agent loop over a tool surface, seal the trace,
label it; and the result row, whose columns are declared once here.

May import: aft_bench.common, aft_bench.world, aft_bench.runtime, aft_bench.interface, aft_bench.tasks,
aft_bench.judge, aft_bench.agents.
"""
