"""Retry delays: exponential with jitter, so many clients of a restarting node do not
come back in lock-step."""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Backoff:
    first: float = 0.05
    cap: float = 2.0

    def delay(self, attempt: int) -> float:
        """Seconds to wait before retry number ``attempt`` (0-based): grows x2 per attempt up
        to ``cap``, then scaled by a random factor in [0.5, 1)."""
        base = min(self.cap, self.first * (2.0 ** min(attempt, 30)))
        jitter: float = 0.5 + random.random() / 2
        return base * jitter


# In-band "come back" statuses (UNAVAILABLE) and broken connections: retry at once.
FAST = Backoff(0.005, 2.0)
# OVERLOADED and friends: the server asked for a pause.
SLOW = Backoff(0.5, 8.0)
# New connections to a node that refused or dropped us.
CONNECT = Backoff(0.05, 2.0)
