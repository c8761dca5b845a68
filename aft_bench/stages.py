"""The stages every invocation passes, in order; faults act at the boundary after a stage."""

from __future__ import annotations

from enum import StrEnum


class Stage(StrEnum):
    REQUEST_ACCEPTED = "REQUEST_ACCEPTED"
    BACKEND_STARTED = "BACKEND_STARTED"
    EFFECT_COMMITTED = "EFFECT_COMMITTED"
    RESPONSE_GENERATED = "RESPONSE_GENERATED"
    RESPONSE_DELIVERED = "RESPONSE_DELIVERED"
    RESPONSE_DROPPED = "RESPONSE_DROPPED"
