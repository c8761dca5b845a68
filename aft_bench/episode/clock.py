"""ToolPro's virtual clock, kept live during an episode: every agent decision costs DEC, every round trip to the
tool server RTT, every program built BUILD. With `jitter` each charge is scaled by its own draw of a lognormal
factor (mean 1, that coefficient of variation), seeded by the episode, so a cold start measures noisy steps while
the same seed gives the same clock in every arm and on every machine."""

from __future__ import annotations

import hashlib
import math
import random
from collections.abc import Mapping


class VirtualClock:
    """The clock of one episode; `now_ms` is decisions x DEC + round trips x RTT + programs x BUILD, each charge
    scaled by its draw (exactly 1 without jitter, so the sum equals the row's count formula)."""

    def __init__(self, profile: Mapping[str, float], seed: str) -> None:
        self.rtt_ms, self.decision_ms, self.build_ms = profile["rtt_ms"], profile["decision_ms"], profile["build_ms"]
        jitter = float(profile.get("jitter", 0.0))
        self._sigma = math.sqrt(math.log1p(jitter * jitter))
        self._rng = random.Random(int.from_bytes(hashlib.sha256(seed.encode()).digest()[:8], "big"))
        self._units = [0.0, 0.0, 0.0]  # decisions, round trips, programs: each the sum of its charges' factors
        self.programs = 0

    def _factor(self) -> float:
        if not self._sigma:
            return 1.0
        return self._rng.lognormvariate(-self._sigma * self._sigma / 2, self._sigma)

    def decision(self) -> None:
        self._units[0] += self._factor()

    def round_trip(self, programs_run: int) -> None:
        """One call answered; `programs_run`: the surface's programs so far (each new one is charged BUILD)."""
        self._units[1] += self._factor()
        while self.programs < programs_run:
            self._units[2] += self._factor()
            self.programs += 1

    @property
    def now_ms(self) -> float:
        d, r, p = self._units
        return d * self.decision_ms + r * self.rtt_ms + p * self.build_ms
