"""Tool routing measured on its own (Tool Forge): routing suites as data, `route-eval` (precision, recall, F1
and context tokens per ranker), and catalog import from a real MCP server with review into lifecycle states.
The router itself is an interface mechanism (`interface/router.py`); this package evaluates and feeds it.

May import: aft_bench.common, aft_bench.world, aft_bench.interface.
"""
