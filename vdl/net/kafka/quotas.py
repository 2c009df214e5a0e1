"""Produce and fetch byte-rate quotas per client id, as Kafka brokers apply them.

Each client id has a token bucket per direction, refilled at the configured rate and
holding at most one second's worth (a burst). A request takes its bytes (produce: the
request's size; fetch: the records returned), and may drive the bucket negative; the time
the bucket needs to get back to zero is the throttle. As Kafka does since KIP-219, the
response goes out at once carrying `throttle_time_ms`, and the connection reads nothing
more from that client until the throttle has passed, so a client that ignores the hint is
slowed all the same.

Sans-I/O: time comes in as seconds on any monotonic clock.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# Buckets that have refilled completely are forgotten, so client ids do not pile up.
_SWEEP_EVERY = 1024


@dataclass(slots=True)
class _Bucket:
    tokens: float
    at: float


class ByteRate:
    """One direction's quota (bytes per second for every client id)."""

    def __init__(self, bytes_per_s: int, burst_s: float = 1.0) -> None:
        if bytes_per_s <= 0:
            raise ValueError("a quota is a positive byte rate")
        self.rate = float(bytes_per_s)
        self.capacity = self.rate * burst_s
        self._buckets: dict[str, _Bucket] = {}
        self._records = 0

    def _refill(self, bucket: _Bucket, now: float) -> None:
        bucket.tokens = min(self.capacity, bucket.tokens + (now - bucket.at) * self.rate)
        bucket.at = now

    def record(self, client_id: str, nbytes: int, now: float) -> int:
        """Charge `nbytes` to the client; the throttle in milliseconds (0 if none)."""
        bucket = self._buckets.get(client_id)
        if bucket is None:
            bucket = self._buckets[client_id] = _Bucket(self.capacity, now)
        self._refill(bucket, now)
        bucket.tokens -= nbytes
        self._records += 1
        if self._records % _SWEEP_EVERY == 0:
            self._sweep(now)
        return self._throttle_ms(bucket)

    def throttle_ms(self, client_id: str, now: float) -> int:
        """How long the client must still wait, without charging anything."""
        bucket = self._buckets.get(client_id)
        if bucket is None:
            return 0
        self._refill(bucket, now)
        return self._throttle_ms(bucket)

    def _throttle_ms(self, bucket: _Bucket) -> int:
        if bucket.tokens >= 0:
            return 0
        return math.ceil(-bucket.tokens / self.rate * 1000)

    def _sweep(self, now: float) -> None:
        for client_id in list(self._buckets):
            bucket = self._buckets[client_id]
            self._refill(bucket, now)
            if bucket.tokens >= self.capacity:
                del self._buckets[client_id]


class KafkaQuotas:
    """The node's quotas; a direction without a rate is unlimited."""

    def __init__(self, produce_bytes_per_s: int | None, fetch_bytes_per_s: int | None) -> None:
        self.produce = ByteRate(produce_bytes_per_s) if produce_bytes_per_s else None
        self.fetch = ByteRate(fetch_bytes_per_s) if fetch_bytes_per_s else None

    @property
    def enabled(self) -> bool:
        return self.produce is not None or self.fetch is not None

    def record_produce(self, client_id: str, nbytes: int, now: float) -> int:
        return 0 if self.produce is None else self.produce.record(client_id, nbytes, now)

    def record_fetch(self, client_id: str, nbytes: int, now: float) -> int:
        return 0 if self.fetch is None else self.fetch.record(client_id, nbytes, now)

    def pause_s(self, client_id: str, now: float) -> float:
        """How long to stop reading from a connection of this client (the larger debt)."""
        waits = [q.throttle_ms(client_id, now) for q in (self.produce, self.fetch) if q]
        return max(waits, default=0) / 1000
