"""Cluster membership: who votes, who only listens, and how a change is written to the log.

Membership changes are single-server changes (Raft thesis, section 4.1): each change adds a
learner, promotes one learner to voter, or removes one member, so any two consecutive voter
sets differ by at most one server and their majorities always overlap. Joint consensus is
not needed and not implemented.

A configuration takes effect on every node as soon as its CONFIG entry is *appended* to that
node's log, not when it commits (thesis 4.1). That is what makes single-server changes safe
without joint consensus; the price is that a node must fall back to the previous
configuration if the entry is truncated away, which `ConfigHistory` handles.

Payload of an `EntryType.CONFIG` entry (big-endian), the whole resulting configuration so a
reader never needs the previous one to interpret it:

    u8  version (= 1)
    u16 number of voters, u16 number of learners
    u64 node id * voters (ascending), u64 node id * learners (ascending)
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

_HEADER = struct.Struct(">BHH")
_ID = struct.Struct(">Q")
_VERSION = 1


@dataclass(frozen=True, slots=True)
class Config:
    """One membership configuration. Node ids are positive integers; 0 means "nobody"."""

    voters: frozenset[int]
    learners: frozenset[int] = frozenset()

    def __post_init__(self) -> None:
        if self.voters & self.learners:
            raise ValueError(f"nodes both voter and learner: {sorted(self.voters & self.learners)}")
        if any(n <= 0 for n in self.voters | self.learners):
            raise ValueError("node ids must be positive")

    @property
    def members(self) -> frozenset[int]:
        return self.voters | self.learners

    def quorum(self) -> int:
        return len(self.voters) // 2 + 1

    def has_quorum(self, nodes: Iterable[int]) -> bool:
        return len(self.voters.intersection(nodes)) >= self.quorum()

    def committed_index(self, match: Mapping[int, int]) -> int:
        """The highest index that a majority of voters has (per `match`, missing = 0)."""
        if not self.voters:
            return 0
        values = sorted((match.get(v, 0) for v in self.voters), reverse=True)
        return values[self.quorum() - 1]

    def vote_result(self, votes: Mapping[int, bool]) -> bool | None:
        """True if a majority granted, False if a majority can no longer grant, else None."""
        granted = sum(1 for v in self.voters if votes.get(v) is True)
        rejected = sum(1 for v in self.voters if votes.get(v) is False)
        if granted >= self.quorum():
            return True
        if len(self.voters) - rejected < self.quorum():
            return False
        return None

    def apply(self, change: ConfChange) -> Config:
        """The configuration after `change`; raises ValueError if it is not a valid step."""
        node = change.node_id
        if change.type is ConfChangeType.ADD_LEARNER:
            if node in self.members:
                raise ValueError(f"node {node} is already a member")
            return Config(self.voters, self.learners | {node})
        if change.type is ConfChangeType.PROMOTE:
            if node not in self.learners:
                raise ValueError(f"node {node} is not a learner")
            return Config(self.voters | {node}, self.learners - {node})
        if node not in self.members:
            raise ValueError(f"node {node} is not a member")
        if self.voters == {node}:
            raise ValueError("cannot remove the last voter")
        return Config(self.voters - {node}, self.learners - {node})


class ConfChangeType(enum.IntEnum):
    ADD_LEARNER = 1
    PROMOTE = 2
    REMOVE = 3


@dataclass(frozen=True, slots=True)
class ConfChange:
    type: ConfChangeType
    node_id: int


def encode_config(config: Config) -> bytes:
    voters = sorted(config.voters)
    learners = sorted(config.learners)
    out = bytearray(_HEADER.pack(_VERSION, len(voters), len(learners)))
    for node in (*voters, *learners):
        out += _ID.pack(node)
    return bytes(out)


def decode_config(data: bytes | bytearray | memoryview) -> Config:
    if len(data) < _HEADER.size:
        raise ValueError("config payload too short")
    version, n_voters, n_learners = _HEADER.unpack_from(data, 0)
    if version != _VERSION:
        raise ValueError(f"unknown config payload version {version}")
    if len(data) != _HEADER.size + _ID.size * (n_voters + n_learners):
        raise ValueError("config payload has the wrong length")
    ids = [
        _ID.unpack_from(data, _HEADER.size + _ID.size * i)[0] for i in range(n_voters + n_learners)
    ]
    return Config(frozenset(ids[:n_voters]), frozenset(ids[n_voters:]))


class ConfigHistory:
    """The configurations in force at each point of the log.

    The first item is the configuration at or before the commit point (it can never be
    truncated away); later items come from CONFIG entries that are appended but not yet
    compacted. Truncating the log drops the items from the truncated entries, which restores
    the configuration that was in force before them.
    """

    def __init__(self, base: Config, base_index: int) -> None:
        self._items: list[tuple[int, Config]] = [(base_index, base)]

    @property
    def current(self) -> Config:
        return self._items[-1][1]

    @property
    def last_index(self) -> int:
        """Index of the entry that set the current configuration (or the base index)."""
        return self._items[-1][0]

    def at(self, index: int) -> Config:
        """Configuration in force once the log ends at `index` (index >= the base index)."""
        found = self._items[0][1]
        for item_index, config in self._items:
            if item_index > index:
                break
            found = config
        return found

    def append(self, index: int, config: Config) -> None:
        if index <= self._items[-1][0]:
            raise ValueError("config entries must be appended in index order")
        self._items.append((index, config))

    def truncate(self, from_index: int) -> bool:
        """Forget configurations set by entries at or after `from_index`; True if any."""
        keep = [item for item in self._items if item[0] < from_index]
        if not keep:
            # The base sits at or below the commit point, which Raft never truncates.
            raise ValueError(f"truncation at {from_index} would remove the base configuration")
        changed = len(keep) != len(self._items)
        self._items = keep
        return changed

    def compact(self, committed: int) -> None:
        """Drop configurations superseded at or before the commit point (no longer needed)."""
        while len(self._items) > 1 and self._items[1][0] <= committed:
            self._items.pop(0)
