"""ElectLeaders (KIP-460; v0 is KIP-183's preferred replica election), from any node.

A partition's preferred leader is the first replica of its assignment. A preferred election
acts whether or not leaders balance themselves (`--leader-rebalance`, Kafka's
auto.leader.rebalance.enable): the node that takes the request asks each partition's
leader, on this node or another (`vdl.cluster.preferred_election`), to hand leadership to
the preferred replica now if it is alive and holds every committed entry (a Raft
leadership transfer), asks again every `_ASK_EVERY_S` in case the message or the transfer
was lost, and answers once leadership has moved, bounded by the request's timeout (0: ask
once and answer at once). As in Kafka, a partition already led by its preferred replica
gets ELECTION_NOT_NEEDED, and one whose preferred replica is not alive and in sync gets
PREFERRED_LEADER_NOT_AVAILABLE: at once where this node knows the partition's in-sync
replicas (it leads it, or its leader's gossip names them), else once the timeout passed
without the move. Any node answers (KIP-590): leadership is read from the node's own
groups and from the leaders' gossip.

Unclean elections (type 1) are refused: a Raft group never elects a leader that lacks
committed entries.
"""

from __future__ import annotations

import logging
import math
from typing import Any

import trio
from kafka.protocol.admin.topics import ElectLeadersResponse

from vdl.broker.cluster_view import COMMAND_TIMEOUT_S, ClusterView
from vdl.log.error_codes import ErrorCode
from vdl.net.kafka.apis.context import Pending, RequestContext, Response, ready
from vdl.net.kafka.control_codec import decode_request, encode_response
from vdl.security.acl import Operation

log = logging.getLogger(__name__)

PREFERRED = 0
UNCLEAN = 1
# v1 is the first with an election type and a top-level error code (KIP-460).
_TYPED_FROM = 1
# How often a waiting request looks at the partitions' leaders again.
_POLL_S = 0.1
# How often a waiting request asks the leaders again (their transfers are rate-limited).
_ASK_EVERY_S = 1.0

_Result = ElectLeadersResponse.ReplicaElectionResult
_PartitionResult = _Result.PartitionResult
TopicPartition = tuple[str, int]
Outcome = tuple[ErrorCode, str | None]


def _wanted(ctx: RequestContext, request: Any) -> list[TopicPartition]:
    """The partitions named, in request order (null: every partition of every topic)."""
    if request.topic_partitions is None:
        return [
            (topic.name, partition)
            for topic in sorted(ctx.broker.catalog.all(), key=lambda t: t.name)
            for partition in range(topic.partitions)
        ]
    wanted: dict[TopicPartition, None] = {}
    for entry in request.topic_partitions:
        for partition in entry.partitions:
            wanted[(entry.topic, partition)] = None
    return list(wanted)


def _known(ctx: RequestContext, topic: str, partition: int) -> bool:
    known = ctx.broker.catalog.get(topic)
    return known is not None and 0 <= partition < known.partitions


def _preferred(cluster: ClusterView, tp: TopicPartition) -> tuple[int, Outcome | None]:
    """The preferred replica, and the answer if it is known already (None: wait)."""
    state = cluster.partition_state(*tp)
    if not state.replicas:
        return -1, (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None)
    preferred = state.replicas[0]
    if state.leader == preferred:
        return preferred, (ErrorCode.ELECTION_NOT_NEEDED, None)
    if state.leader != -1 and preferred not in state.isr:
        return preferred, (
            ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE,
            f"preferred replica {preferred} is not in sync",
        )
    return preferred, None


def handle_elect_leaders(ctx: RequestContext) -> Pending:
    request = decode_request(ctx.header, ctx.frame)
    election_type = request.election_type if ctx.version >= _TYPED_FROM else PREFERRED
    wanted = _wanted(ctx, request)
    outcomes: dict[TopicPartition, Outcome] = {}
    top_error = ErrorCode.NONE
    if not ctx.may_cluster(Operation.ALTER):
        top_error = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        wanted = [] if request.topic_partitions is None else wanted
        for tp in wanted:
            outcomes[tp] = (top_error, None)
    cluster = ctx.broker.cluster
    waiting: dict[TopicPartition, int] = {}
    for tp in wanted:
        if tp in outcomes:
            continue
        if not _known(ctx, *tp):
            outcomes[tp] = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None)
        elif election_type != PREFERRED:
            outcomes[tp] = (
                ErrorCode.INVALID_REQUEST,
                "only preferred elections (type 0): Raft never elects an unclean leader",
            )
        elif cluster is None:
            # One node leads every partition it has; it is their only replica.
            outcomes[tp] = (ErrorCode.ELECTION_NOT_NEEDED, None)
        else:
            preferred, outcome = _preferred(cluster, tp)
            if outcome is None:
                waiting[tp] = preferred
            else:
                outcomes[tp] = outcome
    if election_type not in (PREFERRED, UNCLEAN):
        log.info("ElectLeaders with unknown election type %d refused", election_type)

    def encode() -> bytes:
        by_topic: dict[str, list[Any]] = {}
        for (topic, partition), (error, message) in outcomes.items():
            by_topic.setdefault(topic, []).append(
                _PartitionResult(
                    partition_id=partition, error_code=int(error), error_message=message
                )
            )
        response = ElectLeadersResponse(
            throttle_time_ms=0,
            error_code=int(top_error),
            replica_election_results=[
                _Result(topic=topic, partition_result=results)
                for topic, results in by_topic.items()
            ],
            version=ctx.version,
        )
        return encode_response(ctx.header, response)

    if cluster is None or not waiting:
        return ready(encode())
    view = cluster
    # As in Kafka, a timeout of 0 answers at once: what has not moved yet is timed out.
    timeout_s = min(max(request.timeout_ms, 0) / 1000, COMMAND_TIMEOUT_S)

    async def wait_for_leaders() -> Response:
        asked = -math.inf
        with trio.move_on_after(timeout_s):
            while waiting:
                for tp, preferred in list(waiting.items()):
                    state = view.partition_state(*tp)
                    if state.leader == preferred:
                        outcomes[tp] = (ErrorCode.NONE, None)
                        del waiting[tp]
                    elif state.leader != -1 and preferred not in state.isr:
                        outcomes[tp] = (
                            ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE,
                            f"preferred replica {preferred} is not in sync",
                        )
                        del waiting[tp]
                if waiting:
                    now = trio.current_time()
                    if now - asked >= _ASK_EVERY_S:
                        asked = now
                        for tp in waiting:
                            view.elect_preferred(*tp)
                    await trio.sleep(_POLL_S)
        for tp, preferred in waiting.items():
            # Leaders hand over to a preferred replica in contact holding every committed
            # entry; one that has not taken over within the timeout is not available.
            outcomes[tp] = (
                ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE,
                f"preferred replica {preferred} did not take over within the timeout",
            )
        return encode()

    return wait_for_leaders
