"""Offset retention (Kafka's `offsets.retention.minutes`, KIP-211) as pure decisions.

The coordinator sweeps every `offsets.retention.check.interval.ms`; for each group it knows
of (in memory, by a stored record, or by committed offsets) `decide` says which offsets go
and whether the group goes with them:

- A group with members (any state but Empty, or ids handed out and about to join) loses
  nothing, except offsets of deleted topics.
- A group without members: an offset expires once the retention has passed since the later
  of its commit and the moment the group became Empty. For a group that never had members
  (standalone committers) that is the commit time, as in Kafka; for one that became Empty,
  Kafka counts from that moment only, and VDL also waits for a commit made afterwards (the
  standalone commit `kafka-consumer-groups --reset-offsets` makes) to age, rather than
  expire it at the next sweep.
- A consumer declared on a YDB topic keeps its offsets on that topic for as long as it is
  declared, as YDB does: only names nobody declared (Kafka groups) expire.
- Offsets of a topic that no longer exists go, whatever the group's state (Kafka removes
  them when the topic is deleted).
- A group without members whose offsets are all gone is deleted: its stored record and its
  in-memory state, so ListGroups no longer shows it and DescribeGroups calls it Dead.

A decision is carried out later than it is made (on a cluster, once its command is applied
on every node), so it names what it saw: each offset with its commit time, the record with
its generation. `stale_offset_keys` and `droppable_record` remove only what is still that;
an offset committed again after the decision, or a newer record, stays.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass

from vdl.groups.group import Group, GroupState
from vdl.groups.group_record import GroupRecord, decode_record, record_key
from vdl.groups.offsets import CommittedOffset, TopicPartition, decode_value, offset_key

# Kafka's offsets.retention.minutes and offsets.retention.check.interval.ms defaults.
DEFAULT_RETENTION_MS = 10080 * 60_000
DEFAULT_CHECK_INTERVAL_MS = 600_000

# Topic name -> names of the YDB consumers declared on it.
TopicConsumers = Mapping[str, Collection[str]]


@dataclass(frozen=True, slots=True)
class GroupStanding:
    """What the decision needs to know of one group."""

    group_id: str
    has_members: bool
    # Wall clock; None if the group never had members (or its record predates the stamp).
    empty_since_ms: int | None
    commit_times: Mapping[TopicPartition, int]
    # The generation of its stored record, None if it has none.
    record_generation: int | None = None


@dataclass(frozen=True, slots=True)
class Expiry:
    group_id: str
    # (topic, partition, the commit time the decision saw).
    offsets: tuple[tuple[str, int, int], ...]
    drop_group: bool
    # With drop_group: the stored record to delete, by generation (None: it has none).
    record_generation: int | None = None

    @property
    def stores_nothing(self) -> bool:
        """Only in-memory state goes: nothing to write (or replicate)."""
        return not self.offsets and (not self.drop_group or self.record_generation is None)


def has_members(group: Group) -> bool:
    """Whether the group has members, or ids handed out and about to join, or is in a
    rebalance: it is not Empty in Kafka's sense."""
    return bool(group.members or group.pending or group.state is not GroupState.EMPTY)


def standing(
    group_id: str,
    group: Group | None,
    record: GroupRecord | None,
    offsets: Mapping[TopicPartition, CommittedOffset],
) -> GroupStanding | None:
    """The standing of a group from the coordinator's view (`group`, None if it does not
    hold it), its stored record and its offsets; None while an expiry of it is under way."""
    if group is not None and group.state is GroupState.DEAD:
        return None
    if group is not None:
        members = has_members(group)
        empty_since = group.empty_since_ms
    else:
        # The coordinator holds every stored group it loaded, so a record it does not hold
        # was stored after it forgot the group: nobody is a member, whatever it says.
        members = False
        empty_since = None
        if record is not None and not record.members:
            empty_since = record.empty_since_ms
    return GroupStanding(
        group_id=group_id,
        has_members=members,
        empty_since_ms=empty_since,
        commit_times={tp: c.commit_time_ms for tp, c in offsets.items()},
        record_generation=None if record is None else record.generation,
    )


def decide(
    group: GroupStanding, topics: TopicConsumers, now_ms: int, retention_ms: int
) -> Expiry | None:
    """What of `group` expires at wall-clock `now_ms`; None if nothing does."""
    expired: list[tuple[str, int, int]] = []
    for (topic, partition), committed_at in sorted(group.commit_times.items()):
        declared = topics.get(topic)
        if declared is None:
            expired.append((topic, partition, committed_at))
        elif group.has_members or group.group_id in declared:
            continue
        else:
            since = committed_at
            if group.empty_since_ms is not None:
                since = max(since, group.empty_since_ms)
            if now_ms - since >= retention_ms:
                expired.append((topic, partition, committed_at))
    drop = not group.has_members and len(expired) == len(group.commit_times)
    if not expired and not drop:
        return None
    return Expiry(
        group_id=group.group_id,
        offsets=tuple(expired),
        drop_group=drop,
        record_generation=group.record_generation if drop else None,
    )


def stale_offset_keys(expiry: Expiry, get: Callable[[bytes], bytes | None]) -> list[bytes]:
    """Keys of the decided offsets still committed no later than the decision saw."""
    keys: list[bytes] = []
    for topic, partition, committed_at in expiry.offsets:
        key = offset_key(expiry.group_id, topic, partition)
        raw = get(key)
        if raw is not None and decode_value(raw).commit_time_ms <= committed_at:
            keys.append(key)
    return keys


def droppable_record(expiry: Expiry, get: Callable[[bytes], bytes | None]) -> bytes | None:
    """The key of the group's stored record if the decision drops it and it is still of
    the generation decided on, or older (a deletion decided on the coordinator's newest
    generation drops the record even if that generation's record is not stored yet)."""
    if not expiry.drop_group or expiry.record_generation is None:
        return None
    key = record_key(expiry.group_id)
    raw = get(key)
    if raw is None or decode_record(raw).generation > expiry.record_generation:
        return None
    return key
