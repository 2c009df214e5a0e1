"""Produce and fetch byte-rate quotas per client id, as Kafka brokers apply them.

Each client id has a token bucket per direction, refilled at the configured rate and
holding at most one second's worth (a burst). The two directions differ as in Kafka's
KafkaApis since KIP-219:

- produce: the request's bytes are charged whatever the bucket holds (the records are
  already appended), so the bucket may go negative; the time it needs to get back to zero
  is the throttle, sent with the normal response.
- fetch: the response's bytes are charged only if the bucket can pay them (`admit`).
  Otherwise nothing is charged and the fetch is answered with no records, carrying the
  time until the bucket could pay: the records stay in the log and are read again then.
  A response bigger than the whole burst is let through from a full bucket (and becomes
  debt), so a consumer always makes progress.

Either way the connection reads nothing more from that client until the throttle has
passed (`pause_s`), so a client that ignores the hint is slowed all the same.

Sans-I/O: time comes in as seconds on any monotonic clock. Every throttle given (a
produce's debt, a refused fetch's wait) is observed in `kafka_throttle_seconds{api}`, the
throttle-time Kafka's quota managers record.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from vdl.metrics.stages import STAGES

# Buckets that have refilled completely are forgotten, so client ids do not pile up.
_SWEEP_EVERY = 1024

_PRODUCE_THROTTLE = STAGES.histogram("kafka_throttle_seconds", api="Produce")
_FETCH_THROTTLE = STAGES.histogram("kafka_throttle_seconds", api="Fetch")


@dataclass(slots=True)
class _Bucket:
    tokens: float
    at: float
    # A refused fetch leaves the tokens as they were, so the wait it announced is kept
    # here for the connection to honour.
    blocked_until: float = 0.0


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

    def admit(self, client_id: str, nbytes: int, now: float) -> int:
        """Charge `nbytes` only if the bucket can pay them: 0 if it did; otherwise the
        milliseconds until it could, with nothing charged."""
        bucket = self._buckets.get(client_id)
        if bucket is None:
            bucket = self._buckets[client_id] = _Bucket(self.capacity, now)
        self._refill(bucket, now)
        need = min(float(nbytes), self.capacity)
        if bucket.tokens >= need:
            bucket.tokens -= nbytes
            return 0
        wait_ms = math.ceil((need - bucket.tokens) / self.rate * 1000)
        bucket.blocked_until = max(bucket.blocked_until, now + wait_ms / 1000)
        return wait_ms

    def throttle_ms(self, client_id: str, now: float) -> int:
        """How long the client must still wait, without charging anything."""
        bucket = self._buckets.get(client_id)
        if bucket is None:
            return 0
        self._refill(bucket, now)
        blocked = math.ceil(max(bucket.blocked_until - now, 0.0) * 1000)
        return max(self._throttle_ms(bucket), blocked)

    def _throttle_ms(self, bucket: _Bucket) -> int:
        if bucket.tokens >= 0:
            return 0
        return math.ceil(-bucket.tokens / self.rate * 1000)

    def _sweep(self, now: float) -> None:
        for client_id in list(self._buckets):
            bucket = self._buckets[client_id]
            self._refill(bucket, now)
            # A full bucket has outlived any wait it announced (see admit).
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
        if self.produce is None:
            return 0
        throttle_ms = self.produce.record(client_id, nbytes, now)
        if throttle_ms:
            _PRODUCE_THROTTLE.observe(throttle_ms / 1000)
        return throttle_ms

    def admit_fetch(self, client_id: str, nbytes: int, now: float) -> int:
        """0: send the records; otherwise answer without them, with this throttle."""
        if self.fetch is None:
            return 0
        throttle_ms = self.fetch.admit(client_id, nbytes, now)
        if throttle_ms:
            _FETCH_THROTTLE.observe(throttle_ms / 1000)
        return throttle_ms

    def pause_s(self, client_id: str, now: float) -> float:
        """How long to stop reading from a connection of this client (the larger debt)."""
        waits = [q.throttle_ms(client_id, now) for q in (self.produce, self.fetch) if q]
        return max(waits, default=0) / 1000
