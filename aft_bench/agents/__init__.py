"""Agents: the one protocol every agent implements (start with the brief and the tool surface, act, be told
of state loss, report usage), the registry of agent kinds by name, the deterministic capability-aware
controller, the scripted calibration driver, the `llm` agent (any litellm model) and the offline model server it
can talk to. An agent never sees the criteria, the faults or the trace.

May import: aft_bench.common, aft_bench.interface, aft_bench.tasks.
"""
