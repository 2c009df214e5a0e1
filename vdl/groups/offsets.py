"""Committed consumer offsets, durable in the MetaStore.

A cursor is keyed by (consumer name, topic, partition) and nothing protocol-specific: a Kafka
consumer group and a YDB topic consumer of the same name share it.

Each commit is one synced `write_batch`, so a commit is all-or-nothing and on disk before it
is acknowledged. `OffsetCommit` is a plain value with a byte encoding, so moving the store
behind a replicated metadata group later means proposing the encoded batch and applying it
on commit, with the same keys.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from vdl.backends.api import MetaStore
from vdl.log.error_codes import ErrorCode

# Kafka's offset.metadata.max.bytes default.
MAX_METADATA_BYTES = 4096
NO_OFFSET = -1
NO_LEADER_EPOCH = -1

_PREFIX = b"offset/"
_NAME_LEN = struct.Struct(">H")
_PARTITION = struct.Struct(">I")
# format version, offset, leader epoch, commit time; metadata (UTF-8) follows.
_VALUE = struct.Struct(">Bqiq")
_FORMAT = 1

TopicPartition = tuple[str, int]


@dataclass(frozen=True, slots=True)
class CommittedOffset:
    offset: int
    metadata: str = ""
    leader_epoch: int = NO_LEADER_EPOCH
    commit_time_ms: int = 0


def check_metadata(metadata: str | None) -> ErrorCode:
    if metadata is not None and len(metadata.encode()) > MAX_METADATA_BYTES:
        return ErrorCode.OFFSET_METADATA_TOO_LARGE
    return ErrorCode.NONE


def _name(text: str) -> bytes:
    raw = text.encode()
    return _NAME_LEN.pack(len(raw)) + raw


def _group_prefix(group: str) -> bytes:
    # Length-prefixed names: a group called "a" never matches the keys of group "ab", and
    # any byte (including "/") is allowed in names.
    return _PREFIX + _name(group)


def offset_key(group: str, topic: str, partition: int) -> bytes:
    return _group_prefix(group) + _name(topic) + _PARTITION.pack(partition)


def _parse_key(key: bytes, prefix_len: int) -> TopicPartition:
    (size,) = _NAME_LEN.unpack_from(key, prefix_len)
    start = prefix_len + _NAME_LEN.size
    topic = key[start : start + size].decode()
    (partition,) = _PARTITION.unpack_from(key, start + size)
    return topic, partition


def _parse_full_key(key: bytes) -> tuple[str, TopicPartition]:
    (size,) = _NAME_LEN.unpack_from(key, len(_PREFIX))
    start = len(_PREFIX) + _NAME_LEN.size
    group = key[start : start + size].decode()
    return group, _parse_key(key, start + size)


def encode_value(committed: CommittedOffset) -> bytes:
    head = _VALUE.pack(_FORMAT, committed.offset, committed.leader_epoch, committed.commit_time_ms)
    return head + committed.metadata.encode()


def decode_value(raw: bytes) -> CommittedOffset:
    fmt, offset, epoch, commit_time = _VALUE.unpack_from(raw, 0)
    if fmt != _FORMAT:
        raise ValueError(f"unknown committed-offset format {fmt}")
    return CommittedOffset(offset, raw[_VALUE.size :].decode(), epoch, commit_time)


class OffsetStore:
    def __init__(self, meta: MetaStore) -> None:
        self._meta = meta

    def commit(self, group: str, offsets: Mapping[TopicPartition, CommittedOffset]) -> None:
        """Store every offset of one commit request atomically (one synced batch)."""
        if not offsets:
            return
        puts = {
            offset_key(group, topic, partition): encode_value(committed)
            for (topic, partition), committed in offsets.items()
        }
        self._meta.write_batch(puts)

    def fetch(
        self, group: str, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, CommittedOffset | None]:
        result: dict[TopicPartition, CommittedOffset | None] = {}
        for topic, partition in partitions:
            raw = self._meta.get(offset_key(group, topic, partition))
            result[(topic, partition)] = None if raw is None else decode_value(raw)
        return result

    def all_groups(self) -> dict[str, dict[TopicPartition, CommittedOffset]]:
        """Every committed offset of every group (a full scan: for the retention sweep)."""
        groups: dict[str, dict[TopicPartition, CommittedOffset]] = {}
        for key, value in self._meta.scan(_PREFIX):
            group, tp = _parse_full_key(key)
            groups.setdefault(group, {})[tp] = decode_value(value)
        return groups

    def keys_of_topic(self, topic: str) -> list[bytes]:
        """The keys of every group's committed offsets on `topic` (a full scan: keys start
        with the group, so deleting a topic is the one reader of all of them)."""
        return [key for key, _ in self._meta.scan(_PREFIX) if _parse_full_key(key)[1][0] == topic]

    def fetch_all(self, group: str) -> dict[TopicPartition, CommittedOffset]:
        """Every partition the group has committed, in (topic, partition) key order."""
        prefix = _group_prefix(group)
        return {
            _parse_key(key, len(prefix)): decode_value(value)
            for key, value in self._meta.scan(prefix)
        }
