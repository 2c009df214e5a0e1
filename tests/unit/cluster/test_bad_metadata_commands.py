"""Commands of the wrong shape in group 0's log (peers forward commands checked only for a
string op) are skipped alike on every node; none stops the metadata group."""

from __future__ import annotations

import pytest

from vdl.backends.api import Entry, EntryType
from vdl.cluster.commands import Command, encode_command
from vdl.cluster.metadata import MetadataState
from vdl.cluster.metadata_group import MetadataGroup


@pytest.mark.parametrize(
    "command",
    [
        {"op": "create_topic", "topic": 5, "replicas": [[1]]},
        {"op": "create_topic", "topic": "{", "replicas": None},
        {"op": "register", "node": "x", "kafka": "h:1", "grpc": "h:2"},
        {"op": "register", "node": 1, "kafka": [], "grpc": "h:2"},
        {"op": "add_node", "node": 4, "raft": 7},
        {"op": "set_replicas", "name": "t", "partition": "zero", "replicas": [1]},
        {"op": "delete_topic"},
    ],
)
def test_a_command_of_the_wrong_shape_is_skipped(command: Command) -> None:
    state = MetadataState({1: ("h", 1)})
    group = MetadataGroup(state)
    good = {"op": "register", "node": 1, "kafka": "h:1", "grpc": "h:2"}
    entries = [
        Entry(1, 1, EntryType.DATA, encode_command(command, 1)),
        Entry(1, 2, EntryType.DATA, encode_command(good, 2)),
    ]
    group.apply(entries)
    assert group.applied == 2
    assert state.nodes[1].kafka == ("h", 1)  # the next command still applies
