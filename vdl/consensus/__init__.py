"""Raft consensus: a pure, sans-I/O state machine (`RaftNode`) and its message types.

The Trio driver that persists, sends and applies lives beside it and is the only part that
does I/O. See `raft.py` for the inputs and `ready.py` for the driver's contract.
"""

from vdl.consensus.errors import (
    ConfigChangeRejected,
    ConsensusError,
    NotLeader,
    ProposalDropped,
    SafetyViolation,
)
from vdl.consensus.log_view import LogSource
from vdl.consensus.membership import ConfChange, ConfChangeType, Config
from vdl.consensus.options import RaftOptions
from vdl.consensus.raft import RaftNode
from vdl.consensus.ready import Ready
from vdl.consensus.state import NO_NODE, HardState, Role, SnapshotMeta

__all__ = [
    "NO_NODE",
    "ConfChange",
    "ConfChangeType",
    "Config",
    "ConfigChangeRejected",
    "ConsensusError",
    "HardState",
    "LogSource",
    "NotLeader",
    "ProposalDropped",
    "RaftNode",
    "RaftOptions",
    "Ready",
    "Role",
    "SafetyViolation",
    "SnapshotMeta",
]
