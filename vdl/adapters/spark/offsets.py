"""Per-partition offsets as Spark sees them: JSON, admission control, range splitting.

Pure functions only (no client, no Spark), so the arithmetic that decides what a batch reads
is unit-tested without a JVM.

The offset JSON is the same shape as Spark's Kafka source: ``{"topic": {"0": 23, "1": 7}}``,
where the value is the *next* offset to read. Spark round-trips every offset through
``json.dumps``/``json.loads``, so partition keys are strings from the start; nothing here
relies on dict order.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

# Spark's Kafka source spells "earliest" and "latest" inside offset JSON as -2 and -1.
EARLIEST = -2
LATEST = -1

TopicPartition = tuple[str, int]
# Resolved offsets: every value is a real, non-negative offset.
Offsets = dict[TopicPartition, int]


class OffsetError(ValueError):
    """An offset document that cannot be used; the message says what to fix."""


def to_json_dict(offsets: Mapping[TopicPartition, int]) -> dict[str, dict[str, int]]:
    """Offsets in the nested form Spark stores in the checkpoint's offset log."""
    out: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        out.setdefault(topic, {})[str(partition)] = int(offset)
    return out


def from_json_dict(document: Any, what: str = "offsets") -> Offsets:
    """Parse ``{"topic": {"partition": offset}}`` (already decoded), validating every level."""
    if not isinstance(document, Mapping):
        raise OffsetError(
            f'{what} must be a JSON object like {{"topic": {{"0": 42}}}}, '
            f"got {type(document).__name__}"
        )
    out: Offsets = {}
    for topic, partitions in document.items():
        if not isinstance(topic, str) or not topic:
            raise OffsetError(f"{what}: topic names must be non-empty strings, got {topic!r}")
        if not isinstance(partitions, Mapping):
            raise OffsetError(
                f'{what}: the value for topic "{topic}" must be an object of '
                f"partition -> offset, got {partitions!r}"
            )
        for partition, offset in partitions.items():
            try:
                number = int(partition)
            except (TypeError, ValueError):
                raise OffsetError(
                    f'{what}: partition "{partition}" of topic "{topic}" is not an integer'
                ) from None
            if number < 0:
                raise OffsetError(f'{what}: partition {number} of topic "{topic}" is negative')
            # bool is an int subclass; "true" as an offset is a typo, not offset 1.
            if not isinstance(offset, int) or isinstance(offset, bool):
                raise OffsetError(
                    f'{what}: offset of "{topic}" partition {number} must be an integer, '
                    f"got {offset!r}"
                )
            out[(topic, number)] = offset
    return out


def parse_json(text: str, what: str) -> Offsets:
    """Parse offset JSON given as an option string; errors quote the option's name."""
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        raise OffsetError(
            f'{what} is neither "earliest", "latest" nor valid JSON '
            f'(expected e.g. {{"topic": {{"0": 42, "1": -2}}}}): {exc}'
        ) from None
    return from_json_dict(document, what)


def topics_of(offsets: Iterable[TopicPartition]) -> list[str]:
    return sorted({topic for topic, _ in offsets})


def cap_to_limit(start: Offsets, latest: Offsets, limit: int) -> Offsets:
    """End offsets that admit at most ``limit`` records in total, shared fairly.

    Each partition gets a share proportional to its backlog (largest-remainder rounding, ties
    broken by topic-partition so the answer is deterministic). Unlike a "fill partition 0
    first" split, no partition starves while another has a deep backlog. The total never
    exceeds ``limit``; a partition with no share this time gets one later, because its backlog
    then weighs more.
    """
    if limit <= 0:
        raise OffsetError(f"the per-trigger limit must be positive, got {limit}")
    backlog = {tp: max(0, end - start.get(tp, end)) for tp, end in latest.items()}
    total = sum(backlog.values())
    if total <= limit:
        return dict(latest)
    shares: dict[TopicPartition, int] = {}
    remainders: list[tuple[int, TopicPartition]] = []
    for tp, size in backlog.items():
        whole, remainder = divmod(size * limit, total)
        shares[tp] = whole
        remainders.append((-remainder, tp))
    left = limit - sum(shares.values())
    for _, tp in sorted(remainders)[:left]:
        shares[tp] += 1
    return {tp: start.get(tp, end) + shares[tp] for tp, end in latest.items()}


@dataclass(frozen=True)
class OffsetRange:
    """Offsets ``[start, end)`` of one partition: one Spark task reads exactly these."""

    topic: str
    partition: int
    start: int
    end: int

    @property
    def size(self) -> int:
        return self.end - self.start


def plan_ranges(
    start: Mapping[TopicPartition, int],
    end: Mapping[TopicPartition, int],
    min_partitions: int | None = None,
) -> list[OffsetRange]:
    """Split ``[start, end)`` per partition into task ranges, deterministically.

    Without ``min_partitions`` there is one range per partition with data. With it, and fewer
    ranges than asked for, each partition is cut into a number of pieces proportional to its
    size (at least one, at most one per record), so a large backlog in one partition still
    spreads across cores. The same (start, end, min_partitions) always gives the same ranges:
    a batch replayed after a crash reads exactly what the first attempt read.
    """
    ranges = [
        OffsetRange(topic, partition, start[(topic, partition)], stop)
        for (topic, partition), stop in sorted(end.items())
        if (topic, partition) in start and stop > start[(topic, partition)]
    ]
    if not min_partitions or len(ranges) >= min_partitions:
        return ranges
    total = sum(r.size for r in ranges)
    out: list[OffsetRange] = []
    for r in ranges:
        pieces = max(1, min(r.size, round(min_partitions * r.size / total)))
        for i in range(pieces):
            lo = r.start + r.size * i // pieces
            hi = r.start + r.size * (i + 1) // pieces
            out.append(OffsetRange(r.topic, r.partition, lo, hi))
    return out


@dataclass
class MinRowsGate:
    """Whether a micro-batch may run yet: Spark's ``minOffsetsPerTrigger`` + ``maxTriggerDelay``.

    A batch runs once at least ``min_rows`` records wait, or once ``max_delay_ms`` have passed
    since the last batch ran, whichever comes first. As in Spark's Kafka source, the first
    question after a (re)start is always answered yes: there was no batch to wait from.
    """

    min_rows: int
    max_delay_ms: int
    last_run_ms: float | None = None

    def admits(self, waiting: int, now_ms: float) -> bool:
        if self.last_run_ms is None or now_ms - self.last_run_ms >= self.max_delay_ms:
            self.last_run_ms = now_ms
            return True
        if waiting < self.min_rows:
            return False
        self.last_run_ms = now_ms
        return True
