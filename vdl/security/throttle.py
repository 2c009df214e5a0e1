"""Brute-force protection for Kafka SASL and YDB Login, without locking anyone out.

Failures are counted per (client address, user name) within ``window_s``: once one pair
has failed ``max_failures`` times, the answer to each further failure of that pair is held
back, longer each time (doubling up to ``max_delay_s``), and an address that fails ten
times as often, whatever the names, is slowed the same way (password spraying). A correct
password is always checked and always let through at once: one misconfigured client on a
shared address (a NAT, a Kubernetes node) slows only itself, never the other users there.

Password checks (pbkdf2, deliberately slow) run on threads of their own, at most
``check_threads`` at once for the whole node, so a login flood cannot take the threads
that sync Raft state to disk; and at most ``checks_per_host`` at once per address, so one
address cannot queue everyone else's logins behind its own. Kafka's own broker answers a
failed SASL authentication after ``connection.failed.authentication.delay.ms`` for the
same reason (KIP-306); here the delay grows with the failures.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import trio

# Beyond this many failures per window from one address, all names together, its
# failures are delayed too: this many times max_failures.
_HOST_FACTOR = 10
_FIRST_DELAY_S = 0.5
# User names come from the client; only this much of one is kept as a key.
_MAX_NAME = 256


def host_of(peer: str) -> str:
    """``1.2.3.4:5678``, ``[::1]:5678`` or ``ipv4:1.2.3.4:5678`` -> the host part."""
    text = peer.removeprefix("ipv4:").removeprefix("ipv6:")
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit():
        return text
    return host.strip("[]")


@dataclass(slots=True)
class _HostChecks:
    limiter: trio.CapacityLimiter
    holders: int = 0


class LoginThrottle:
    def __init__(
        self,
        max_failures: int = 10,
        window_s: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
        max_tracked: int = 10_000,
        *,
        max_delay_s: float = 5.0,
        check_threads: int = 2,
        checks_per_host: int = 2,
    ) -> None:
        self.max_failures = max_failures
        self.window_s = window_s
        self.max_delay_s = max_delay_s
        self.checks_per_host = checks_per_host
        self._check_threads = check_threads
        self._clock = clock
        self._max_tracked = max_tracked
        self._failures: dict[tuple[str, str | None], deque[float]] = {}
        self._threads: trio.CapacityLimiter | None = None
        self._checking: dict[str, _HostChecks] = {}

    def _recent(self, key: tuple[str, str | None]) -> int:
        failures = self._failures.get(key)
        if failures is None:
            return 0
        horizon = self._clock() - self.window_s
        while failures and failures[0] <= horizon:
            failures.popleft()
        if not failures:
            del self._failures[key]
        return len(failures)

    def _record(self, key: tuple[str, str | None]) -> int:
        count = self._recent(key)
        if key not in self._failures and len(self._failures) >= self._max_tracked:
            # Bounded memory under a spray of addresses and names: forget the oldest entry.
            self._failures.pop(next(iter(self._failures)))
        self._failures.setdefault(key, deque()).append(self._clock())
        return count + 1

    def failed(self, host: str, user: str) -> float:
        """Record a failed login of ``user`` from ``host``; the seconds to hold its answer."""
        pair = self._record((host, user[:_MAX_NAME]))
        everyone = self._record((host, None))
        if self.max_failures <= 0:
            return 0.0
        excess = max(pair - self.max_failures, everyone - self.max_failures * _HOST_FACTOR)
        if excess <= 0:
            return 0.0
        return min(self.max_delay_s, _FIRST_DELAY_S * float(2 ** min(excess - 1, 32)))

    def checks_in_progress(self, host: str) -> int:
        """Password checks from ``host`` running or waiting for their turn."""
        checking = self._checking.get(host)
        return 0 if checking is None else checking.holders

    async def check_password(self, host: str, check: Callable[[], bool]) -> bool:
        """Run ``check`` (slow) on a password-check thread, in ``host``'s turn."""
        if self._threads is None:
            self._threads = trio.CapacityLimiter(self._check_threads)
        checking = self._checking.get(host)
        if checking is None:
            checking = self._checking[host] = _HostChecks(
                trio.CapacityLimiter(self.checks_per_host)
            )
        checking.holders += 1
        try:
            async with checking.limiter:
                return await trio.to_thread.run_sync(check, limiter=self._threads)
        finally:
            checking.holders -= 1
            if not checking.holders:
                del self._checking[host]
