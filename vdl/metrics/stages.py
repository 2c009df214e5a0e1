"""Per-stage timings of a replicated produce: fixed-bucket histograms a node keeps.

Every stage is a histogram with fixed, log-scale bucket bounds, as a Prometheus histogram
is (cumulative `_bucket{le=...}`, `_sum`, `_count`), so the observability work can expose
them as they are. Names follow Prometheus' conventions (`_seconds`, `_bytes`). Nothing
here imports the rest of the project: every layer, storage included, may record into it.

The stages of one acks=all produce on a cluster leader, in order (one node: the raft ones
stay empty, the flusher and storage ones fill):

- `kafka_produce_decode_seconds`: decoding a Produce request (per request).
- `kafka_produce_append_seconds`: validating and appending every partition's batch (per
  request). On a cluster the append proposes: when the group's loop is parked, the
  driver sends the AppendEntries and writes the leader's store right inside it.
- `raft_propose_to_commit_seconds`: a stream's proposal to the moment the group's commit
  covers it and the stream's commit point moves (per entry, on the leader). It holds, in
  parallel, the leader's own write to durable and the followers' round trips; a commit
  needs the majority, so with three replicas it is about the larger of the leader's
  write-to-durable and the faster follower's round trip, plus scheduling.
- `raft_append_round_trip_seconds{peer}`: the leader's view of one follower: an
  AppendEntries carrying entries handed to the transport, to the AppendResponse of that
  follower covering its last entry arriving (per message). On the follower it is made of
  the next two stages, plus the network and the hand-offs to and from the transport.
- `raft_receive_to_write_seconds`: a follower: AppendEntries delivered to the group, to
  its entries appended (not yet synced) to the store (per message).
- `raft_write_to_durable_seconds{role}`: entries appended to the store, to the flusher's
  report that they are durable (per append; on a follower the ack leaves right then).
  Made of waiting for a flusher round, the round itself and the hand-off back.
- `kafka_produce_commit_to_response_seconds`: the moment the last of the request's
  partitions committed (its commit waiter was woken), to the response encoded and handed
  to the connection's writer (per request; acks=all only).

So on the leader, one produce's time from its frame to its response is about decode +
append + propose-to-commit + commit-to-response; reading the frame and writing the
response on the socket are outside the stages.

Below them, per node, whoever the writer is:

- `flusher_round_seconds`: one flusher round in its thread (every dirty store synced).
- `flusher_handoff_seconds`: a round's end in the thread to its report running on the
  Trio thread (the cost of handing durability back across threads).
- `storage_sync_write_seconds`, `storage_fdatasync_seconds`, `storage_sync_bytes`: one
  sync of a segment store: writing what it queued, then its fdatasync(s), and the bytes
  written by that sync (the bytes each fdatasync makes durable).

Reading them: one registry per node process (`STAGES`); the node writes its snapshot as
JSON to `<data-dir>/stage_timings.json` on SIGUSR1 and at shutdown (`vdl/node.py`), and
`bench/stage_report.py` turns snapshots taken around a load phase into a table.

Costs: recording is a `bisect` over 72 floats and three additions, a few hundred
nanoseconds. There is no lock: each histogram has one writing thread (the flusher's
thread writes only the flusher and storage ones, as does a rare sync in a worker thread
at a truncation; the Trio thread writes the rest), and a snapshot
from another thread may see one observation half-counted, which does not matter here.
"""

from __future__ import annotations

import json
import os
import time
from bisect import bisect_left
from collections import deque
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

# 50 µs .. 11 s, four buckets per power of two (each about 19% wider than the last).
LATENCY_BOUNDS_S: tuple[float, ...] = tuple(50e-6 * 2 ** (i / 4) for i in range(72))
# 512 B .. 64 MiB, two buckets per power of two.
BYTES_BOUNDS: tuple[float, ...] = tuple(float(512 * 2 ** (i / 2)) for i in range(35))

SNAPSHOT_FILE = "stage_timings.json"


class Histogram:
    """Counts per bucket `(bounds[i-1], bounds[i]]`, plus one above the last bound."""

    __slots__ = ("bounds", "count", "counts", "labels", "max", "name", "sum")

    def __init__(
        self,
        name: str,
        bounds: tuple[float, ...] = LATENCY_BOUNDS_S,
        labels: Mapping[str, str] | None = None,
    ) -> None:
        if list(bounds) != sorted(set(bounds)) or not bounds:
            raise ValueError("bounds must be increasing")
        self.name = name
        self.labels: dict[str, str] = dict(labels or {})
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.count = 0
        self.sum = 0.0
        self.max = 0.0

    def observe(self, value: float) -> None:
        # bisect_left: a value equal to a bound is in that bound's bucket (le=bound).
        self.counts[bisect_left(self.bounds, value)] += 1
        self.count += 1
        self.sum += value
        if value > self.max:
            self.max = value

    def since(self, start: float) -> None:
        """Observe the `time.perf_counter()` seconds elapsed since `start`."""
        self.observe(time.perf_counter() - start)

    def quantile(self, q: float) -> float:
        """An estimate of the q-quantile (0..1), interpolating inside its bucket as
        Prometheus' histogram_quantile does; above the last bound, up to the maximum seen.
        0.0 when empty."""
        if self.count == 0:
            return 0.0
        rank = q * self.count
        seen = 0
        for i, n in enumerate(self.counts):
            if n and seen + n >= rank:
                lo = self.bounds[i - 1] if i > 0 else 0.0
                # The largest value seen caps the bucket it falls in (and the last one).
                hi = min(self.bounds[i] if i < len(self.bounds) else self.max, self.max)
                return lo + (hi - lo) * max(rank - seen, 0.0) / n
            seen += n
        return self.max

    def merge(self, other: Histogram) -> None:
        """Add `other`'s observations (same bounds) to this one."""
        if other.bounds != self.bounds:
            raise ValueError(f"{self.name}: cannot merge histograms with other bounds")
        for i, n in enumerate(other.counts):
            self.counts[i] += n
        self.count += other.count
        self.sum += other.sum
        self.max = max(self.max, other.max)

    def to_json(self) -> dict[str, Any]:
        counts = list(self.counts)  # one copy: another thread may be recording
        return {
            "name": self.name,
            "labels": dict(self.labels),
            "bounds": list(self.bounds),
            "counts": counts,
            "count": sum(counts),
            "sum": self.sum,
            "max": self.max,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Histogram:
        hist = cls(str(data["name"]), tuple(float(b) for b in data["bounds"]), data["labels"])
        counts = [int(n) for n in data["counts"]]
        if len(counts) != len(hist.counts):
            raise ValueError(f"{hist.name}: {len(counts)} counts for {len(hist.bounds)} bounds")
        hist.counts = counts
        hist.count = sum(counts)
        hist.sum = float(data["sum"])
        hist.max = float(data["max"])
        return hist


class Counter:
    __slots__ = ("labels", "name", "value")

    def __init__(self, name: str, labels: Mapping[str, str] | None = None) -> None:
        self.name = name
        self.labels: dict[str, str] = dict(labels or {})
        self.value = 0

    def inc(self, amount: int = 1) -> None:
        self.value += amount


class IndexTimer:
    """Times raft indexes from one point to a later one that covers them in order
    (`start(index)` ... `stop_upto(index)`): e.g. sent to acknowledged, proposed to
    committed. Bounded: if the later point never comes, the oldest starts are dropped."""

    __slots__ = ("_limit", "_starts", "hist")

    def __init__(self, hist: Histogram, limit: int = 4096) -> None:
        self.hist = hist
        self._starts: deque[tuple[int, float]] = deque()
        self._limit = limit

    def start(self, index: int) -> None:
        """Start timing `index`; an index not above the last one started is being timed
        already (a resend, say): it keeps its first start."""
        starts = self._starts
        if starts and starts[-1][0] >= index:
            return
        if len(starts) >= self._limit:
            starts.popleft()
        starts.append((index, time.perf_counter()))

    def stop_upto(self, index: int) -> None:
        starts = self._starts
        if not starts or starts[0][0] > index:
            return
        now = time.perf_counter()
        observe = self.hist.observe
        while starts and starts[0][0] <= index:
            observe(now - starts.popleft()[1])

    def drop_from(self, index: int) -> None:
        """Forget the starts at `index` and later (the entries were truncated)."""
        starts = self._starts
        while starts and starts[-1][0] >= index:
            starts.pop()


def _key(name: str, labels: Mapping[str, str]) -> tuple[str, tuple[tuple[str, str], ...]]:
    return name, tuple(sorted(labels.items()))


class StageRegistry:
    """The named histograms and counters of one node. Callers look a histogram up once
    and keep it; the lookup is not for the hot path."""

    def __init__(self) -> None:
        self._histograms: dict[tuple[str, tuple[tuple[str, str], ...]], Histogram] = {}
        self._counters: dict[tuple[str, tuple[tuple[str, str], ...]], Counter] = {}

    def histogram(
        self, name: str, bounds: tuple[float, ...] = LATENCY_BOUNDS_S, **labels: str
    ) -> Histogram:
        key = _key(name, labels)
        hist = self._histograms.get(key)
        if hist is None:
            hist = self._histograms[key] = Histogram(name, bounds, labels)
        return hist

    def counter(self, name: str, **labels: str) -> Counter:
        key = _key(name, labels)
        counter = self._counters.get(key)
        if counter is None:
            counter = self._counters[key] = Counter(name, labels)
        return counter

    def histograms(self) -> list[Histogram]:
        return list(self._histograms.values())

    def counters(self) -> list[Counter]:
        return list(self._counters.values())

    def snapshot(self) -> dict[str, Any]:
        return {
            "pid": os.getpid(),
            "time": time.time(),
            "histograms": [h.to_json() for h in self.histograms()],
            "counters": [
                {"name": c.name, "labels": dict(c.labels), "value": c.value}
                for c in self.counters()
            ],
        }

    def write_snapshot(self, path: Path) -> None:
        """Write `snapshot()` as JSON to `path`, atomically (readers never see half)."""
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(self.snapshot()))
        os.replace(tmp, path)


def load_snapshot(path: Path) -> tuple[list[Histogram], dict[str, int]]:
    """The histograms and counters (by `name{labels}`) of a snapshot file."""
    data = json.loads(path.read_text())
    histograms = [Histogram.from_json(h) for h in data["histograms"]]
    counters = {label_name(c["name"], c["labels"]): int(c["value"]) for c in data["counters"]}
    return histograms, counters


def label_name(name: str, labels: Mapping[str, str]) -> str:
    """`name{k=v,...}`, or just `name` without labels."""
    if not labels:
        return name
    return name + "{" + ",".join(f"{k}={v}" for k, v in sorted(labels.items())) + "}"


def merged(histograms: Iterable[Histogram]) -> dict[str, Histogram]:
    """Histograms merged by name and labels (e.g. one stage over several snapshots)."""
    out: dict[str, Histogram] = {}
    for hist in histograms:
        key = label_name(hist.name, hist.labels)
        if key in out:
            out[key].merge(hist)
        else:
            copy = Histogram(hist.name, hist.bounds, hist.labels)
            copy.merge(hist)
            out[key] = copy
    return out


# The node's registry: one node per process (`python -m vdl.node`), as prometheus-client
# keeps one default registry per process. Tests that run several nodes in one process
# see their observations summed, which is all they are for.
STAGES = StageRegistry()

# The stages of a replicated produce, in the order a request meets them (as the partition
# leader, then as a follower, then the disk), each with the roles whose node records it:
# the one list the bench's stage table and the stage tests read. A stage recorded per peer
# (`{peer=N}` on the leader) is named by its base name.
PRODUCE_PATH: tuple[tuple[str, frozenset[str]], ...] = (
    ("kafka_produce_decode_seconds", frozenset({"leader"})),
    ("kafka_produce_append_seconds", frozenset({"leader"})),
    ("raft_append_round_trip_seconds", frozenset({"leader per peer"})),
    ("raft_receive_to_write_seconds", frozenset({"follower"})),
    ("raft_write_to_durable_seconds{role=leader}", frozenset({"leader"})),
    ("raft_write_to_durable_seconds{role=follower}", frozenset({"follower"})),
    ("raft_propose_to_commit_seconds", frozenset({"leader"})),
    ("kafka_produce_commit_to_response_seconds", frozenset({"leader"})),
    ("flusher_round_seconds", frozenset({"leader", "follower"})),
    ("flusher_handoff_seconds", frozenset({"leader"})),
    ("storage_sync_write_seconds", frozenset({"leader"})),
    ("storage_fdatasync_seconds", frozenset({"leader", "follower"})),
    ("storage_sync_bytes", frozenset({"leader", "follower"})),
)


def produce_stages(role: str | None = None) -> tuple[str, ...]:
    """The produce path's stage names in order; with `role`, those a node in it records."""
    return tuple(name for name, roles in PRODUCE_PATH if role is None or role in roles)
