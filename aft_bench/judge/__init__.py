"""The judge: labels computed from the sealed trace, the terminal backend state and the task criteria only,
never from what the agent claims about itself; and the detectors that calibration checks.

May import: aft_bench.common, aft_bench.world, aft_bench.runtime, aft_bench.tasks.
"""
