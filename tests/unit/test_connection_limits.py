"""Connection limits of a listener: the counts, and refusals logged without flooding."""

from __future__ import annotations

import logging

import pytest

from vdl.net.limits import ConnectionLimits


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_limits_in_all_and_per_address(caplog: pytest.LogCaptureFixture) -> None:
    clock = _Clock()
    limits = ConnectionLimits("Kafka", 3, 2, clock=clock, log_every_s=10)
    assert limits.admit("a") and limits.admit("a")
    assert not limits.admit("a")  # per address
    assert limits.admit("b")
    assert not limits.admit("c")  # in all
    assert limits.open == 3
    limits.release("a")
    assert limits.admit("c")
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="vdl.net.limits"):
        # The in-all limit was logged a moment ago (for "c"): these are only counted.
        for _ in range(50):
            assert not limits.admit("d")
        clock.now += 11
        assert not limits.admit("d")
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1, lines
    assert "max-connections 3" in lines[0] and "50 more refused" in lines[0]
    for host in ("a", "b", "c"):
        limits.release(host)
    assert limits.open == 0 and not limits._per_ip
