"""Tasks tau = (spec, s0, phi, alpha, psi, budget) split by audience (the brief an agent sees, the script a
scripted controller follows, the criteria only the judge reads), and workloads (a world, fault variants,
eight tasks).

May import: aft_bench.common, aft_bench.world, aft_bench.runtime.
"""
