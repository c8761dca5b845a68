"""Serving a faulted world to an external agent over the Model Context Protocol: `aft-bench serve`. The MCP
client is one more agent kind (`mcp`) on the one episode loop; its episodes are labelled by the same oracle and
recorded like every run.

May import: aft_bench.common, aft_bench.world, aft_bench.runtime, aft_bench.interface, aft_bench.tasks,
aft_bench.judge, aft_bench.agents, aft_bench.episode, aft_bench.experiment.
"""
