"""Small value types shared by the consensus modules: roles, hard state, snapshot metadata."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from vdl.consensus.membership import Config

NO_NODE = 0  # node ids are positive; 0 stands for "no leader" / "no vote"


class Role(enum.Enum):
    FOLLOWER = "follower"
    PRE_CANDIDATE = "pre-candidate"
    CANDIDATE = "candidate"
    LEADER = "leader"


@dataclass(frozen=True, slots=True)
class HardState:
    """What a node must persist besides its log.

    `term` and `vote` are required for safety: they must be durable before any message the
    core marks "after persist" leaves the node. `commit` is included only as a restart hint
    (readers can see up to it without waiting for a leader); it may lag behind and is
    clamped to the log on restart, so losing it is harmless.
    """

    term: int = 0
    vote: int = NO_NODE
    commit: int = 0


@dataclass(frozen=True, slots=True)
class SnapshotMeta:
    """Describes a log prefix that a follower receives as files instead of as entries.

    Everything up to and including `index` is committed; `term` is the term of the entry at
    `index`, and `config` the membership in force there.
    """

    index: int
    term: int
    config: Config
