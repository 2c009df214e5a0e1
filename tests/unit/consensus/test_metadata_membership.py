"""The metadata state's membership commands: add, move replicas, remove."""

from __future__ import annotations

import uuid

from vdl.broker.topics import Topic
from vdl.cluster.metadata import MetadataState
from vdl.log.error_codes import ErrorCode


def _state() -> tuple[MetadataState, list[tuple[int, tuple[int, ...]]]]:
    state = MetadataState({1: ("h", 1), 2: ("h", 2), 3: ("h", 3)})
    topic = Topic("t", 2, uuid.uuid4(), {})
    state.apply({"op": "create_topic", "topic": topic.encode().decode(), "replicas": [[1, 2], [3]]})
    moves: list[tuple[int, tuple[int, ...]]] = []
    state.on_replicas.append(lambda t, p, g, r: moves.append((p, r)))
    return state, moves


def test_add_move_and_remove_a_node() -> None:
    state, moves = _state()
    assert state.apply({"op": "add_node", "node": 4, "raft": "h:4"}).error == ErrorCode.NONE
    assert state.members[4] == ("h", 4)
    assert (
        state.apply(
            {"op": "set_replicas", "name": "t", "partition": 0, "replicas": [1, 2, 4]}
        ).error
        == ErrorCode.NONE
    )
    assert moves == [(0, (1, 2, 4))]
    assert state.apply({"op": "register", "node": 4, "kafka": "h:9", "grpc": "h:8"}).error == 0
    assert state.apply({"op": "remove_node", "node": 4}).error == ErrorCode.NONE
    assert 4 not in state.members and 4 not in state.nodes
    assert state.placements["t"].replicas == ((1, 2), (3,))
    assert moves[-1] == (0, (1, 2))
    # A removed node still running cannot register again; a retried removal is harmless.
    assert state.apply({"op": "register", "node": 4, "kafka": "h:9", "grpc": "h:8"}).error != 0
    assert state.apply({"op": "remove_node", "node": 4}).error == ErrorCode.NONE
    # Its id is retired: a late add_node (it kept asking to join) does not bring it back.
    assert state.apply({"op": "add_node", "node": 4, "raft": "h:4"}).error == (
        ErrorCode.INVALID_REQUEST
    )
    assert 4 not in state.members


def test_invalid_changes_are_refused() -> None:
    state, moves = _state()
    assert state.apply({"op": "remove_node", "node": 3}).error == (
        ErrorCode.INVALID_REPLICATION_FACTOR
    )
    for replicas in ([], [1, 1], [1, 9]):
        outcome = state.apply(
            {"op": "set_replicas", "name": "t", "partition": 0, "replicas": replicas}
        )
        assert outcome.error == ErrorCode.INVALID_REPLICA_ASSIGNMENT
    assert (
        state.apply({"op": "set_replicas", "name": "t", "partition": 5, "replicas": [1]}).error
        == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    )
    assert moves == []
