"""Brute-force protection: after ``max_failures`` failed logins from one client address
within ``window_s``, further attempts from it are refused without checking the password
until the oldest failure ages out. Shared by Kafka SASL and YDB Login, keyed by host only
(a client that reconnects gets a new port)."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable


def host_of(peer: str) -> str:
    """``1.2.3.4:5678``, ``[::1]:5678`` or ``ipv4:1.2.3.4:5678`` -> the host part."""
    text = peer.removeprefix("ipv4:").removeprefix("ipv6:")
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit():
        return text
    return host.strip("[]")


class LoginThrottle:
    def __init__(
        self,
        max_failures: int = 10,
        window_s: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
        max_tracked: int = 10_000,
    ) -> None:
        self.max_failures = max_failures
        self.window_s = window_s
        self._clock = clock
        self._max_tracked = max_tracked
        self._failures: dict[str, deque[float]] = {}

    def _recent(self, host: str) -> deque[float] | None:
        failures = self._failures.get(host)
        if failures is None:
            return None
        horizon = self._clock() - self.window_s
        while failures and failures[0] <= horizon:
            failures.popleft()
        if not failures:
            del self._failures[host]
            return None
        return failures

    def retry_after(self, host: str) -> float:
        """0 if ``host`` may try now, else the seconds until it may."""
        if self.max_failures <= 0:
            return 0.0
        failures = self._recent(host)
        if failures is None or len(failures) < self.max_failures:
            return 0.0
        return max(0.0, failures[-self.max_failures] + self.window_s - self._clock())

    def failed(self, host: str) -> None:
        if host not in self._failures and len(self._failures) >= self._max_tracked:
            # Bounded memory under a spray of addresses: forget the oldest entry.
            self._failures.pop(next(iter(self._failures)))
        self._failures.setdefault(host, deque()).append(self._clock())
