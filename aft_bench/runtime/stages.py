"""The stages every invocation passes, in order.

A fault of a stage acts where that stage is reached: faults of REQUEST_ACCEPTED, BACKEND_STARTED and
RESPONSE_GENERATED act right after the stage is recorded (on the admitted request, the running backend, the
generated response); faults of EFFECT_COMMITTED alter the commit itself, so they fire just before the
EFFECT_COMMITTED stage event, which then records the altered commit.
"""

from __future__ import annotations

from enum import StrEnum


class Stage(StrEnum):
    REQUEST_ACCEPTED = "REQUEST_ACCEPTED"
    BACKEND_STARTED = "BACKEND_STARTED"
    EFFECT_COMMITTED = "EFFECT_COMMITTED"
    RESPONSE_GENERATED = "RESPONSE_GENERATED"
    RESPONSE_DELIVERED = "RESPONSE_DELIVERED"
    RESPONSE_DROPPED = "RESPONSE_DROPPED"
