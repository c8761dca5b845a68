"""`aft-bench scorecard`: what a real MCP server does to a call re-issued after its answer was lost, tool by tool,
measured behind the gateway and read from the real state, with the treatments a consuming team can add (the
gateway's key, verification) and whether the server's annotations agree. No model, no agent.

May import: aft_bench.common, aft_bench.world, aft_bench.runtime.
"""
