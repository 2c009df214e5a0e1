"""Where the replicas of a new topic's partitions go."""

from __future__ import annotations

import zlib
from collections.abc import Sequence


def default_replication_factor(node_count: int) -> int:
    return max(1, min(3, node_count))


def assign_replicas(
    topic: str, partitions: int, replication_factor: int, nodes: Sequence[int]
) -> list[list[int]]:
    """Round-robin over the sorted node ids, starting at a node picked by the topic name,
    so the partitions of many topics spread over every node."""
    ordered = sorted(nodes)
    if not 1 <= replication_factor <= len(ordered):
        raise ValueError(f"replication factor {replication_factor} needs 1..{len(ordered)} nodes")
    start = zlib.crc32(topic.encode()) % len(ordered)
    return [
        [ordered[(start + p + k) % len(ordered)] for k in range(replication_factor)]
        for p in range(partitions)
    ]
