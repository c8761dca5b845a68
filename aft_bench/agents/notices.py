"""What the harness itself says to a model, beside the task: the restart notice. Kept apart so that the LLM agent
(which says it) and the offline model server (which recognises it) both import it without importing each other."""

from __future__ import annotations

RESTARTED = "Your process restarted and lost its local state (conversation included)."
