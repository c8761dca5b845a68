"""Worlds: manifests (records, s0, principals, operations with effect classes), the backend that executes
operations on a store (memory or SQLite, one `Store` protocol), and generated tool catalogs. Knows nothing
of faults, interfaces or agents.

May import: aft_bench.common.
"""
