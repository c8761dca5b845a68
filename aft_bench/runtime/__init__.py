"""The runtime between backend and interface: the stages of an invocation, faults as data and their
injection at stage boundaries, the stage pipeline with process-local and durable invocation state, and the
append-only, hash-chained oracle trace.

May import: aft_bench.common, aft_bench.world.
"""
