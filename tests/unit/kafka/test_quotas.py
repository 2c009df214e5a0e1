"""Byte-rate quotas as token buckets: a burst is free, debt becomes a throttle that shrinks
as time passes, client ids are independent, and refilled buckets are forgotten."""

from __future__ import annotations

import pytest

from vdl.net.kafka.quotas import ByteRate, KafkaQuotas


def test_burst_is_free_and_debt_is_a_throttle() -> None:
    rate = ByteRate(1000)
    assert rate.record("a", 1000, now=0.0) == 0  # one second's worth: the burst
    assert rate.record("a", 500, now=0.0) == 500  # half a second in debt
    assert rate.throttle_ms("a", now=0.25) == 250
    assert rate.throttle_ms("a", now=0.5) == 0
    # Another client id has its own bucket.
    assert rate.record("b", 1000, now=0.5) == 0


def test_unlimited_directions_never_throttle() -> None:
    quotas = KafkaQuotas(None, 100)
    assert quotas.record_produce("a", 10**9, now=0.0) == 0
    assert quotas.record_fetch("a", 300, now=0.0) == 2000
    assert quotas.pause_s("a", now=0.0) == pytest.approx(2.0)
    assert not KafkaQuotas(None, None).enabled


def test_full_buckets_are_swept() -> None:
    rate = ByteRate(1000)
    for i in range(2047):
        rate.record(f"c{i}", 1, now=0.0)
    rate.record("last", 1, now=10.0)  # the 2048th record sweeps; all but "last" refilled
    assert len(rate._buckets) == 1
