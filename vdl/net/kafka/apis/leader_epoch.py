"""OffsetForLeaderEpoch (API key 23, KIP-101, KIP-279, KIP-320) and the leader-epoch check
that Fetch and ListOffsets share.

VDL stamps every batch with the Raft term of the leader that appended it as its
partitionLeaderEpoch, so a partition's leader epochs are its Raft terms. A consumer that
saw a leader change asks for the end offset of the last epoch it consumed from; if the new
leader's log diverged before that offset, the consumer's position is past a truncation.
The answer comes from the stream's leader-epoch table (`vdl/log/leader_epochs.py`), as
Kafka's leader-epoch cache gives it: the largest epoch at or below the one asked for and
the offset where the next epoch's first batch begins, or the log end offset for the
current epoch; UNDEFINED (-1, -1) for an epoch below the earliest in the log.

`current_leader_epoch` (v2+; also in Fetch v9+ and ListOffsets v4+) fences clients with
stale metadata: FENCED_LEADER_EPOCH if it is older than the partition's epoch now,
UNKNOWN_LEADER_EPOCH if newer, and -1 skips the check. So does 0: Raft terms of leaders
start at 1, so 0 never names a VDL leader's epoch, and librdkafka sends 0 in Fetch while
Metadata has given it no epoch (a partition without a known leader); fencing it would
stop such a consumer. Metadata reports the leader's term as the epoch (`metadata.py`), so
clients validate their positions after a leader change. NOT_LEADER_OR_FOLLOWER from a
node that does not lead the partition, whether a consumer (replica_id -1) or a broker
asks; DESCRIBE on the topic or TOPIC_AUTHORIZATION_FAILED.

`epoch_at` gives ListOffsets v4+ its leader_epoch: the epoch of the batch holding an
offset, or the partition's epoch now for the offset the next batch will get.
"""

from __future__ import annotations

import logging
from typing import Any

from kafka.protocol.consumer import OffsetForLeaderEpochResponse

from vdl.broker.topics import TopicError
from vdl.log.error_codes import ErrorCode
from vdl.log.leader_epochs import UNDEFINED_EPOCH, UNDEFINED_OFFSET
from vdl.log.stream import LogStream
from vdl.net.kafka.apis.context import Pending, RequestContext, ready
from vdl.net.kafka.control_codec import decode_request, encode_response
from vdl.security.acl import Operation

log = logging.getLogger(__name__)

_TopicResult = OffsetForLeaderEpochResponse.OffsetForLeaderTopicResult
_PartitionResult = _TopicResult.EpochEndOffset
# Below the first term a Raft leader can have: what clients without an epoch may send.
_FIRST_TERM = 1


def check_leader_epoch(stream: LogStream, current_leader_epoch: int) -> None:
    """KIP-320's fencing: a request's current_leader_epoch against the partition's."""
    if current_leader_epoch < _FIRST_TERM:
        return  # unknown to the client (-1, or librdkafka's 0)
    epoch = stream.leader_epoch
    if current_leader_epoch < epoch:
        raise TopicError(
            ErrorCode.FENCED_LEADER_EPOCH,
            f"{stream.name}: leader epoch {current_leader_epoch} is older than {epoch}",
        )
    if current_leader_epoch > epoch:
        raise TopicError(
            ErrorCode.UNKNOWN_LEADER_EPOCH,
            f"{stream.name}: leader epoch {current_leader_epoch} is newer than {epoch}",
        )


def epoch_at(stream: LogStream, offset: int) -> int:
    """The leader epoch of the batch holding `offset` (the newest epoch that began at or
    before it); the current epoch at or past the log end; -1 below the earliest known."""
    if offset >= stream.log_end_offset:
        return stream.leader_epoch
    epoch = UNDEFINED_EPOCH
    for entry_epoch, start in stream.epochs.entries():
        if start > offset:
            break
        epoch = entry_epoch
    return epoch


def handle_offset_for_leader_epoch(ctx: RequestContext) -> Pending:
    request = decode_request(ctx.header, ctx.frame)
    topics = [
        _TopicResult(
            topic=topic.topic,
            partitions=[_answer(ctx, str(topic.topic), part) for part in topic.partitions],
        )
        for topic in request.topics or []
    ]
    response = OffsetForLeaderEpochResponse(throttle_time_ms=0, topics=topics, version=ctx.version)
    return ready(encode_response(ctx.header, response))


def _answer(ctx: RequestContext, topic: str, part: Any) -> Any:
    partition = int(part.partition)
    try:
        if not ctx.may_topic(Operation.DESCRIBE, topic):
            raise TopicError(ErrorCode.TOPIC_AUTHORIZATION_FAILED, f"may not describe {topic!r}")
        stream = ctx.broker.leader_stream(topic, partition)
        check_leader_epoch(stream, int(part.current_leader_epoch))
        epoch, end_offset = stream.end_offset_for_epoch(int(part.leader_epoch))
    except TopicError as exc:
        log.info("OffsetForLeaderEpoch %s-%d refused: %s", topic, partition, exc)
        return _PartitionResult(
            error_code=int(exc.error),
            partition=partition,
            leader_epoch=UNDEFINED_EPOCH,
            end_offset=UNDEFINED_OFFSET,
        )
    return _PartitionResult(
        error_code=0, partition=partition, leader_epoch=epoch, end_offset=end_offset
    )
