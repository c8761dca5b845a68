"""aft-bench: a controlled interface-intervention benchmark harness for LLM tool-using agents."""

__version__ = "0.1.0"
