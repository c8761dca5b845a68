"""The agent-facing interface: mechanisms and conditions (data), tool specs, the mechanism layer over the
pipeline, offline token counting and BM25 ranking for discovery, and the raw pipeline surface that scripted
calibration cases drive. Knows nothing of agents or tasks.

May import: aft_bench.common, aft_bench.world, aft_bench.runtime.
"""
