"""Writing a transaction's commit or abort markers to its partitions (KIP-98).

The transaction coordinator decides a transaction, then hands its partitions to
`MarkerWriter.write`: each partition gets one control batch (see
`vdl.log.record_batch.build_control_batch`) appended through that partition's own Raft
group, and the call returns once each marker is committed there, or with the partition's
error. A partition this node leads is written here. Another one's leader is asked over the
raft connection (a `txn_marker` forward frame, `ClusterManager.forward_handlers`), which
writes it and answers with a `txn_marker_done` frame carrying the same request id. Forward
frames are best effort, so a request unanswered within a second is sent again, to whoever
leads the partition by then. A copy may still be served after another copy's answer, even
after the producer began its next transaction; that is safe because each marker carries
the number of the decision it writes (its coordinator epoch) and a partition never writes
a decision's marker twice, nor an earlier decision's after a later one
(`LogStream.append_marker`).

Errors per partition, as Kafka's WriteTxnMarkers answers them: NONE once the marker is
committed; UNKNOWN_TOPIC_OR_PARTITION for a partition that does not exist (a deleted
topic); INVALID_PRODUCER_EPOCH for a marker older than the producer's epoch there;
otherwise the last transient error (NOT_LEADER_OR_FOLLOWER, REQUEST_TIMED_OUT) when
`timeout_s` runs out, and the coordinator tries again.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Sequence
from typing import Any

import trio

from vdl.broker.broker import Broker
from vdl.broker.topics import TopicError
from vdl.cluster.commands import Command
from vdl.cluster.manager import ClusterManager
from vdl.log.error_codes import ErrorCode
from vdl.log.stream import StreamError

log = logging.getLogger(__name__)

REQUEST_OP = "txn_marker"
REPLY_OP = "txn_marker_done"
# How long one forwarded request is given before it is sent again.
_RESEND_S = 1.0
# How long to wait before looking again for a partition's leader (an election).
_NO_LEADER_WAIT_S = 0.1
# How long a leader works on a forwarded request (its sender resends after _RESEND_S).
_SERVE_TIMEOUT_S = 5.0
# Forwarded requests queued for this node and served at once, at most.
_QUEUED_REQUESTS = 1024
_CONCURRENT_REQUESTS = 256
_FINAL = frozenset(
    {ErrorCode.NONE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.INVALID_PRODUCER_EPOCH}
)


class MarkerWriter:
    def __init__(self, broker: Broker, cluster: ClusterManager | None = None) -> None:
        self._broker = broker
        self._cluster = cluster
        self._waiting: dict[str, tuple[trio.Event, list[ErrorCode]]] = {}
        self._requests_in, self._requests_out = trio.open_memory_channel[Command](_QUEUED_REQUESTS)
        if cluster is not None:
            cluster.forward_handlers[REQUEST_OP] = self._on_request
            cluster.forward_handlers[REPLY_OP] = self._on_reply

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Serve the markers other nodes ask this one to write (until cancelled)."""
        limiter = trio.CapacityLimiter(_CONCURRENT_REQUESTS)
        async with trio.open_nursery() as nursery:
            task_status.started()
            async for request in self._requests_out:
                # Taken here and given back by the task, on behalf of the request.
                token = object()
                await limiter.acquire_on_behalf_of(token)
                nursery.start_soon(self._serve_request, request, limiter, token)

    async def write(
        self,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        coordinator_epoch: int,
        partitions: Sequence[tuple[str, int]],
        timeout_s: float,
    ) -> dict[tuple[str, int], ErrorCode]:
        """Write the marker to each partition; each one's error (see the module doc)."""
        results = {key: ErrorCode.REQUEST_TIMED_OUT for key in partitions}
        with trio.move_on_after(timeout_s):
            async with trio.open_nursery() as nursery:
                for key in results:
                    nursery.start_soon(
                        self._write_one,
                        key,
                        (producer_id, producer_epoch, commit, coordinator_epoch),
                        results,
                    )
        return results

    async def _write_one(
        self,
        key: tuple[str, int],
        marker: tuple[int, int, bool, int],
        results: dict[tuple[str, int], ErrorCode],
    ) -> None:
        topic, partition = key
        while True:
            if not self._exists(topic, partition):
                results[key] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                return
            leader = -1 if self._cluster is None else self._leader(topic, partition)
            if self._cluster is None or leader == self._cluster.node_id:
                error = await self.write_local(topic, partition, *marker)
            elif leader > 0:
                error = await self._write_remote(leader, topic, partition, marker)
            else:
                error = ErrorCode.NOT_LEADER_OR_FOLLOWER
            results[key] = error
            if error in _FINAL:
                return
            await trio.sleep(_NO_LEADER_WAIT_S)

    def _exists(self, topic: str, partition: int) -> bool:
        known = self._broker.catalog.get(topic)
        return known is not None and 0 <= partition < known.partitions

    def _leader(self, topic: str, partition: int) -> int:
        assert self._cluster is not None
        return self._cluster.leader_term(topic, partition)[0]

    async def write_local(
        self,
        topic: str,
        partition: int,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        coordinator_epoch: int,
    ) -> ErrorCode:
        """Write the marker to a partition this node leads; its error once committed."""
        try:
            stream = self._broker.leader_stream(topic, partition)
            offset = stream.append_marker(producer_id, producer_epoch, commit, coordinator_epoch)
            await stream.wait_committed(offset)
        except (TopicError, StreamError) as exc:
            return exc.error
        return ErrorCode.NONE

    async def _write_remote(
        self, leader: int, topic: str, partition: int, marker: tuple[int, int, bool, int]
    ) -> ErrorCode:
        assert self._cluster is not None
        request_id = uuid.uuid4().hex
        done = trio.Event()
        outcome: list[ErrorCode] = []
        self._waiting[request_id] = (done, outcome)
        producer_id, producer_epoch, commit, coordinator_epoch = marker
        request = {
            "op": REQUEST_OP,
            "request_id": request_id,
            "reply_to": self._cluster.node_id,
            "topic": topic,
            "partition": partition,
            "producer_id": producer_id,
            "producer_epoch": producer_epoch,
            "commit": commit,
            "coordinator_epoch": coordinator_epoch,
        }
        try:
            self._cluster.transport.forward(leader, json.dumps(request).encode())
            with trio.move_on_after(_RESEND_S):
                await done.wait()
            return outcome[0] if outcome else ErrorCode.REQUEST_TIMED_OUT
        finally:
            del self._waiting[request_id]

    # -- the leader's side of a forwarded request -----------------------------------------

    def _on_request(self, command: Command) -> None:
        if _parse_request(command) is None:
            log.warning("ignoring a malformed transaction marker request: %.200r", command)
            return
        try:
            self._requests_in.send_nowait(command)
        except trio.WouldBlock:
            # Its sender asks again after _RESEND_S.
            log.warning("transaction marker requests queue full: one dropped")

    async def _serve_request(
        self, command: Command, limiter: trio.CapacityLimiter, token: object
    ) -> None:
        try:
            parsed = _parse_request(command)
            assert parsed is not None
            reply_to, topic, partition, marker = parsed
            error = ErrorCode.REQUEST_TIMED_OUT
            with trio.move_on_after(_SERVE_TIMEOUT_S):
                error = await self.write_local(topic, partition, *marker)
            reply = {"op": REPLY_OP, "request_id": command["request_id"], "error": int(error)}
            assert self._cluster is not None
            self._cluster.transport.forward(reply_to, json.dumps(reply).encode())
        finally:
            limiter.release_on_behalf_of(token)

    def _on_reply(self, command: Command) -> None:
        request_id, error = command.get("request_id"), command.get("error")
        waiting = self._waiting.get(request_id) if isinstance(request_id, str) else None
        if waiting is None or not isinstance(error, int):
            return
        try:
            code = ErrorCode(error)
        except ValueError:
            log.warning("ignoring a transaction marker reply with error %r", error)
            return
        if not waiting[1]:
            waiting[1].append(code)
            waiting[0].set()


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _parse_request(
    command: Command,
) -> tuple[int, str, int, tuple[int, int, bool, int]] | None:
    """(reply_to, topic, partition, marker) of a well-formed request, else None."""
    ints = ("reply_to", "partition", "producer_id", "producer_epoch", "coordinator_epoch")
    if not all(_is_int(command.get(name)) for name in ints):
        return None
    if not isinstance(command.get("request_id"), str) or not isinstance(command.get("topic"), str):
        return None
    if not isinstance(command.get("commit"), bool):
        return None
    # The wire ranges: int64 producer id, int16 epoch, int32 coordinator epoch, partition.
    if not (
        0 <= command["producer_id"] < 1 << 63
        and 0 <= command["producer_epoch"] < 1 << 15
        and 0 <= command["coordinator_epoch"] < 1 << 31
        and 0 <= command["partition"] < 1 << 31
    ):
        return None
    return (
        command["reply_to"],
        command["topic"],
        command["partition"],
        (
            command["producer_id"],
            command["producer_epoch"],
            command["commit"],
            command["coordinator_epoch"],
        ),
    )
