"""Where the replicas of a new topic's partitions go."""

from __future__ import annotations

import zlib
from collections.abc import Collection, Sequence

from vdl.broker.topics import TopicError
from vdl.log.error_codes import ErrorCode


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


def check_assignment(
    assignments: Sequence[tuple[int, Sequence[int]]], nodes: Collection[int]
) -> list[list[int]]:
    """A new topic's manual replica assignment (CreateTopics' `assignments`: partition
    index, broker ids), checked as Kafka checks it; the replica lists in partition order.
    INVALID_REPLICA_ASSIGNMENT unless every partition 0..n-1 is listed once, each with
    the same number of distinct replicas, all of them nodes in `nodes`."""
    if not assignments:
        raise _invalid("the manual partition assignment is empty")
    by_partition: dict[int, list[int]] = {}
    for index, replicas in assignments:
        if index in by_partition:
            raise _invalid(f"partition {index} is assigned more than once")
        by_partition[index] = [int(n) for n in replicas]
    if sorted(by_partition) != list(range(len(by_partition))):
        raise _invalid(
            "partitions should be a consecutive 0-based integer sequence, got "
            f"{sorted(by_partition)}"
        )
    ordered = [by_partition[p] for p in range(len(by_partition))]
    count = len(ordered[0])
    for partition, replicas in enumerate(ordered):
        if not replicas:
            raise _invalid(f"partition {partition} has an empty replica list")
        if len(replicas) != count:
            raise _invalid(
                "all partitions in the manual partition assignment must have the same "
                f"number of replicas; partition {partition} has {len(replicas)}, "
                f"partition 0 has {count}"
            )
        if len(set(replicas)) != len(replicas):
            raise _invalid(f"partition {partition} names a broker more than once: {replicas}")
        unknown = sorted(n for n in replicas if n not in nodes)
        if unknown:
            raise _invalid(
                f"partition {partition} is assigned to broker(s) {unknown}, which are not "
                f"in the cluster (its brokers: {sorted(nodes)})"
            )
    return ordered


def _invalid(message: str) -> TopicError:
    return TopicError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, message)
