"""Analysis of recorded results: matched pairs, statistics, Table 3 and the other tables, the report and its
figures, the summary, the CI gate and the release audit. Reads results; runs nothing.

May import: aft_bench.common, aft_bench.runtime, aft_bench.tasks, aft_bench.agents, aft_bench.judge,
aft_bench.episode, aft_bench.experiment.
"""
