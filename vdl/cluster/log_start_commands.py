"""DeleteRecords on a cluster: a partition's log start, moved by a metadata-group command.

    {"op": "delete_records", "name": "orders", "topic_id": "<uuid>", "partition": 0,
     "offset": 600}

The partition's leader checks the request against its high watermark and runs the command
through group 0 (`forwarding.py`); every node applies it, and a node holding a replica of
the partition persists the new start in its metadata store and moves its stream's start
(`Broker.apply_log_start`); its retention pass then deletes the whole segments below it.

Why group 0 rather than the partition's own Raft group: the log start is not a record and
has no offset, so a partition-group entry for it would need a new entry type that every
log store, snapshot and replay path carries, and a start carried in the partition log is
lost with the segment that holds it, or with a snapshot that skips it. Group 0's log is
replayed from its start on every restart and reaches every node, including one that was
down or that takes a snapshot of the partition later, so every replica reaches the same
start whatever its own log holds. The start only ever moves forward (a command at or below
the current start changes nothing), so replay and a forwarded command applied twice are
harmless, and `topic_id` keeps a command from touching a topic created under the same name
later.
"""

from __future__ import annotations

from vdl.broker.broker import Broker
from vdl.cluster.commands import Command
from vdl.cluster.metadata import MetadataState, Outcome
from vdl.log.error_codes import ErrorCode

DELETE_RECORDS = "delete_records"


class ReplicatedLogStarts:
    def __init__(self, broker: Broker) -> None:
        self._broker = broker
        self._state: MetadataState | None = None

    def register(self, state: MetadataState, forwardable: set[str]) -> None:
        """Before group 0 starts applying its log: its commands must find their handler;
        any node may forward the command to group 0's leader."""
        self._state = state
        state.handlers[DELETE_RECORDS] = self._apply
        forwardable.add(DELETE_RECORDS)

    def _apply(self, command: Command) -> Outcome:
        assert self._state is not None
        try:
            name = str(command["name"])
            topic_id = str(command["topic_id"])
            partition = int(command["partition"])
            offset = int(command["offset"])
        except (KeyError, TypeError, ValueError) as exc:
            return Outcome(ErrorCode.INVALID_REQUEST, f"bad delete_records command: {exc}")
        topic = self._state.topics.get(name)
        if topic is None or str(topic.topic_id) != topic_id:
            return Outcome(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"no topic {name!r}")
        if not 0 <= partition < topic.partitions:
            return Outcome(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"no {name}-{partition}")
        if offset < 0:
            return Outcome(ErrorCode.OFFSET_OUT_OF_RANGE, f"log start {offset} is negative")
        self._broker.apply_log_start(topic, partition, offset)
        return Outcome()
