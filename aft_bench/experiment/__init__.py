"""Experiments: configs and their matrix of cells, comparisons (data), the builder that turns a cell into an
episode through the registries, the batch runner (executors, journal, run directory, provenance, evidence
freeze) and detector calibration.

May import: aft_bench.common, aft_bench.world, aft_bench.runtime, aft_bench.interface, aft_bench.tasks,
aft_bench.judge, aft_bench.agents, aft_bench.episode.
"""
