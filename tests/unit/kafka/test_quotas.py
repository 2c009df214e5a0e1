"""Byte-rate quotas as token buckets: a burst is free, debt becomes a throttle that shrinks
as time passes, client ids are independent, and refilled buckets are forgotten. Produce is
charged whatever the bucket holds; a fetch the bucket cannot pay is refused (answered
without records) and charged nothing."""

from __future__ import annotations

import pytest

from vdl.backends.api import Buffer
from vdl.log.error_codes import ErrorCode
from vdl.net.kafka.apis.fetch import without_records
from vdl.net.kafka.fetch_codec import FetchPartitionResult
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
    assert quotas.admit_fetch("a", 100, now=0.0) == 0
    assert quotas.admit_fetch("a", 50, now=0.0) == 500
    assert quotas.pause_s("a", now=0.0) == pytest.approx(0.5)
    assert not KafkaQuotas(None, None).enabled


def test_full_buckets_are_swept() -> None:
    rate = ByteRate(1000)
    for i in range(2047):
        rate.record(f"c{i}", 1, now=0.0)
    rate.record("last", 1, now=10.0)  # the 2048th record sweeps; all but "last" refilled
    assert len(rate._buckets) == 1


def test_fetch_within_the_bucket_is_charged_and_sent() -> None:
    rate = ByteRate(1000)
    assert rate.admit("c", 600, now=0.0) == 0
    assert rate.admit("c", 400, now=0.0) == 0  # exactly the burst
    assert rate.throttle_ms("c", now=0.0) == 0  # never in debt


def test_fetch_over_quota_is_refused_uncharged_until_the_bucket_can_pay() -> None:
    rate = ByteRate(1000)
    assert rate.admit("c", 800, now=0.0) == 0
    # 200 left, 500 wanted: refused, and told to come back when 500 are there.
    assert rate.admit("c", 500, now=0.0) == 300
    # Refusing charged nothing: the same 300 ms, not more, from the same state.
    assert rate.admit("c", 500, now=0.0) == 300
    # The connection holds the client back for the announced wait...
    assert rate.throttle_ms("c", now=0.1) == 200
    # ...after which the same response fits.
    assert rate.admit("c", 500, now=0.3) == 0
    # An empty response is always sent, even while refused.
    assert rate.admit("c", 0, now=0.3) == 0


def test_oversized_fetch_goes_out_from_a_full_bucket_and_becomes_debt() -> None:
    rate = ByteRate(1000)
    assert rate.admit("c", 1500, now=0.0) == 0  # bigger than the burst: never refused forever
    assert rate.throttle_ms("c", now=0.0) == 500  # the debt holds the next request back
    assert rate.admit("c", 1500, now=0.5) == 1000  # back at zero, the burst must refill
    assert rate.admit("c", 1500, now=1.5) == 0


def test_rate_bound_of_refused_and_admitted_fetches() -> None:
    # A client fetching 300-byte responses as often as it is let through: what it gets
    # over time never exceeds the burst plus the rate.
    rate = ByteRate(1000)
    now, sent = 0.0, 0
    while now < 10.0:
        wait_ms = rate.admit("c", 300, now)
        if wait_ms == 0:
            sent += 300
            now += 0.001
        else:
            now += wait_ms / 1000
    assert sent <= 1000 + 1000 * now
    assert sent >= 1000 * (now - 1)  # and the quota is not wasted either


def test_a_refused_fetch_keeps_every_partition_but_no_records() -> None:
    records: list[Buffer] = [b"batch-1", b"batch-2"]
    denied = int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
    topics = [
        ("t", [FetchPartitionResult(0, 0, 42, 42, 7, records=records)]),
        ("u", [FetchPartitionResult(3, denied, -1, -1, -1)]),
    ]
    assert without_records(topics) == [
        ("t", [FetchPartitionResult(0, 0, 42, 42, 7, records=[])]),
        ("u", [FetchPartitionResult(3, denied, -1, -1, -1)]),
    ]
    assert topics[0][1][0].records == records  # the original is left alone
