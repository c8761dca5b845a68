"""Shared plumbing with no benchmark meaning: canonical JSON and hashing, error types, TOML data files,
crash points for the kill tests, redaction of secrets.

May import: nothing from aft_bench.
"""
