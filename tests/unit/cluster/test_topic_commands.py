"""Group 0's topic commands: a delete that names the topic's id deletes only that topic,
so a forwarded delete applied a second time leaves a topic created under the name since."""

from __future__ import annotations

import uuid

from vdl.broker.topics import Topic
from vdl.cluster.commands import Command
from vdl.cluster.metadata import MetadataState
from vdl.log.error_codes import ErrorCode


def _create(topic: Topic) -> Command:
    return {"op": "create_topic", "topic": topic.encode().decode(), "replicas": [[1]]}


def test_a_repeated_delete_leaves_the_topic_created_again() -> None:
    state = MetadataState({1: ("h", 1)})
    first = Topic("t", 1, uuid.uuid4())
    assert state.apply(_create(first)).error == ErrorCode.NONE
    delete: Command = {"op": "delete_topic", "name": "t", "topic_id": str(first.topic_id)}
    assert state.apply(delete).error == ErrorCode.NONE
    second = Topic("t", 1, uuid.uuid4())
    assert state.apply(_create(second)).error == ErrorCode.NONE
    # The same command once more (resent by its forwarder): the new topic stays.
    assert state.apply(delete).error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert state.topics["t"].topic_id == second.topic_id


def test_a_delete_without_an_id_deletes_whatever_has_the_name() -> None:
    state = MetadataState({1: ("h", 1)})
    assert state.apply(_create(Topic("t", 1, uuid.uuid4()))).error == ErrorCode.NONE
    assert state.apply({"op": "delete_topic", "name": "t"}).error == ErrorCode.NONE
    assert "t" not in state.topics
    gone = state.apply({"op": "delete_topic", "name": "t"})
    assert gone.error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
