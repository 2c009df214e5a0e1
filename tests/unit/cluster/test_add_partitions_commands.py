"""Group 0's `add_partitions`: every node grows the topic alike (new raft groups from the
counter, replicas as the command places them), a repeat changes nothing, and a command for
a topic since deleted and created again under the name is refused."""

from __future__ import annotations

import uuid

from vdl.broker.topics import Topic
from vdl.cluster.commands import Command
from vdl.cluster.metadata import MetadataState, Placement
from vdl.cluster.placement import assign_replicas
from vdl.log.error_codes import ErrorCode

_MEMBERS = {1: ("h", 1), 2: ("h", 2), 3: ("h", 3)}


def _created(topic: Topic | None = None, partitions: int = 3) -> tuple[MetadataState, Topic]:
    state = MetadataState(_MEMBERS)
    topic = topic or Topic("t", partitions, uuid.uuid4())
    replicas = assign_replicas("t", partitions, 3, [1, 2, 3])
    command = {"op": "create_topic", "topic": topic.encode().decode(), "replicas": replicas}
    assert state.apply(command).error == ErrorCode.NONE
    return state, topic


def _grow(topic: Topic, count: int, seen: int) -> Command:
    return {
        "op": "add_partitions",
        "name": topic.name,
        "topic_id": str(topic.topic_id),
        "count": count,
        "replicas": assign_replicas(topic.name, count, 3, [1, 2, 3])[seen:],
    }


def test_every_node_grows_the_topic_alike_and_a_repeat_changes_nothing() -> None:
    grown: list[tuple[str, int, int]] = []
    topic = Topic("t", 3, uuid.uuid4())
    states = [_created(topic)[0] for _ in range(2)]  # two nodes that applied the create
    for state in states:
        state.on_grown.append(lambda t, p, first: grown.append((t.name, t.partitions, first)))
        outcome = state.apply(_grow(topic, 5, 3))
        assert outcome.error == ErrorCode.NONE, outcome
    assert grown == [("t", 5, 3), ("t", 5, 3)]
    first, second = states
    assert first.placements == second.placements
    assert first.placements["t"].groups == (1, 2, 3, 4, 5)
    assert first.placements["t"].replicas == tuple(
        tuple(r) for r in assign_replicas("t", 5, 3, [1, 2, 3])
    )
    assert first.topics["t"].partitions == 5
    # Writers without a partition id stay hashed over the partitions of before.
    assert first.topics["t"].hashed_partitions == 3
    before = (first.topics["t"], first.placements["t"], first.next_group)
    again = first.apply(_grow(topic, 5, 3))
    assert again.error == ErrorCode.INVALID_PARTITIONS
    assert (first.topics["t"], first.placements["t"], first.next_group) == before
    assert grown == [("t", 5, 3), ("t", 5, 3)]


def test_a_command_computed_before_another_growth_adds_only_what_is_missing() -> None:
    state, topic = _created()
    assert state.apply(_grow(topic, 4, 3)).error == ErrorCode.NONE
    # Sent by a node that still saw 3 partitions: partition 3 keeps its replicas.
    late = _grow(topic, 6, 3)
    late["replicas"] = [[1], [2], [3]]
    assert state.apply(late).error == ErrorCode.NONE
    placement = state.placements["t"]
    assert len(placement.replicas) == 6 and placement.groups == (1, 2, 3, 4, 5, 6)
    assert placement.replicas[3] == tuple(assign_replicas("t", 4, 3, [1, 2, 3])[3])
    assert placement.replicas[4:] == ((2,), (3,))
    assert state.topics["t"].hashed_partitions == 3


def test_a_topic_created_again_under_the_name_is_not_grown() -> None:
    state, old = _created()
    assert state.apply({"op": "delete_topic", "name": "t"}).error == ErrorCode.NONE
    new = Topic("t", 1, uuid.uuid4())
    create = {"op": "create_topic", "topic": new.encode().decode(), "replicas": [[1, 2, 3]]}
    assert state.apply(create).error == ErrorCode.NONE
    outcome = state.apply(_grow(old, 5, 3))
    assert outcome.error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert state.topics["t"].partitions == 1
    assert state.placements["t"] == Placement(((1, 2, 3),), (4,))


def test_replicas_that_are_not_distinct_members_are_refused() -> None:
    state, topic = _created()
    bad_lists: list[list[list[int]]] = [[[1, 1, 2]], [[1, 2, 9]], [[]]]
    for bad in bad_lists:
        command = _grow(topic, 4, 3)
        command["replicas"] = bad
        outcome = state.apply(command)
        assert outcome.error == ErrorCode.INVALID_REPLICA_ASSIGNMENT, (bad, outcome)
    assert state.topics["t"].partitions == 3 and state.next_group == 4
