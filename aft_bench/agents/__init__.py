"""Agents: the one protocol every agent implements (start with the brief and the tool surface, act, be told
of state loss, report usage), the registry of agent kinds by name, the deterministic capability-aware
controller and the scripted calibration driver. An agent never sees the criteria, the faults or the trace.

May import: aft_bench.common, aft_bench.interface, aft_bench.tasks.
"""
