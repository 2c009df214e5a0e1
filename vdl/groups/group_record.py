"""What of a consumer group outlives its coordinator: the stored record of a generation.

Kafka writes a group's metadata to its offsets log whenever a generation's assignment is
settled, and a new coordinator loads it, so members keep their ids, generation and
assignment and simply carry on heartbeating there. VDL keeps the same record: taken by
`GroupCoordinator` when a group becomes Stable (the leader's assignment arrived), when it
becomes Empty (stamped with the wall-clock time, from which the retention of its committed
offsets runs: `vdl.groups.retention`), and when a static member is replaced; stored in the
MetaStore of one node or replicated through the metadata group on a cluster
(`vdl.cluster.group_commands`).

Held requests and timers are not part of it: they belong to connections of the old
coordinator. A loaded member gets a fresh session from the moment of loading.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from vdl.backends.api import MetaStore

_PREFIX = b"groups/state/"


@dataclass(frozen=True, slots=True)
class MemberRecord:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupRecord:
    group_id: str
    generation: int
    protocol_type: str | None
    protocol: str | None
    leader: str | None
    members: tuple[MemberRecord, ...]
    # Wall-clock time the group became Empty, in a record without members; None otherwise
    # (and in records stored before it was kept).
    empty_since_ms: int | None = None


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def record_to_doc(record: GroupRecord) -> dict[str, Any]:
    """A JSON-ready document (also the body of the replicated command)."""
    return {
        "group": record.group_id,
        "generation": record.generation,
        "protocol_type": record.protocol_type,
        "protocol": record.protocol,
        "leader": record.leader,
        "members": [
            {
                "id": m.member_id,
                "instance": m.group_instance_id,
                "client": m.client_id,
                "host": m.client_host,
                "session_ms": m.session_timeout_ms,
                "rebalance_ms": m.rebalance_timeout_ms,
                "protocol_type": m.protocol_type,
                "protocols": [[name, _b64(meta)] for name, meta in m.protocols],
                "assignment": _b64(m.assignment),
            }
            for m in record.members
        ],
        "empty_since_ms": record.empty_since_ms,
    }


def _optional_str(value: Any) -> str | None:
    return None if value is None else str(value)


def record_from_doc(doc: dict[str, Any]) -> GroupRecord:
    """The record of `record_to_doc`; KeyError/TypeError/ValueError if malformed."""
    members = tuple(
        MemberRecord(
            member_id=str(m["id"]),
            group_instance_id=_optional_str(m["instance"]),
            client_id=str(m["client"]),
            client_host=str(m["host"]),
            session_timeout_ms=int(m["session_ms"]),
            rebalance_timeout_ms=int(m["rebalance_ms"]),
            protocol_type=str(m["protocol_type"]),
            protocols=tuple(
                (str(name), base64.b64decode(meta, validate=True)) for name, meta in m["protocols"]
            ),
            assignment=base64.b64decode(m["assignment"], validate=True),
        )
        for m in doc["members"]
    )
    return GroupRecord(
        group_id=str(doc["group"]),
        generation=int(doc["generation"]),
        protocol_type=_optional_str(doc["protocol_type"]),
        protocol=_optional_str(doc["protocol"]),
        leader=_optional_str(doc["leader"]),
        members=members,
        # Absent from records written before it was kept.
        empty_since_ms=None if doc.get("empty_since_ms") is None else int(doc["empty_since_ms"]),
    )


def record_key(group_id: str) -> bytes:
    return _PREFIX + group_id.encode()


def encode_record(record: GroupRecord) -> bytes:
    return json.dumps(record_to_doc(record), sort_keys=True).encode()


def decode_record(raw: bytes) -> GroupRecord:
    doc = json.loads(raw)
    if not isinstance(doc, dict):
        raise ValueError("a group record is a JSON object")
    return record_from_doc(doc)


class GroupRecordStore:
    """Group records in a MetaStore, one key per group."""

    def __init__(self, meta: MetaStore) -> None:
        self._meta = meta

    def put(self, record: GroupRecord, *, sync: bool = True) -> None:
        self._meta.write_batch({record_key(record.group_id): encode_record(record)}, sync=sync)

    def get(self, group_id: str) -> GroupRecord | None:
        raw = self._meta.get(record_key(group_id))
        return None if raw is None else decode_record(raw)

    def records(self) -> Iterator[GroupRecord]:
        for _, raw in self._meta.scan(_PREFIX):
            yield decode_record(raw)
