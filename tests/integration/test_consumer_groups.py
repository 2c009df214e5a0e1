"""Consumer groups and committed offsets against a real node, with real client libraries.

Each group member runs in its own thread (aiokafka: an asyncio loop in a thread), commits
every message synchronously after reading it, and logs its assignment changes. The checks:
no partition is ever owned by two members at once, every partition has an owner once a
rebalance settles, every message is consumed, and a restarted group resumes exactly at its
committed offsets.
"""

from __future__ import annotations

import asyncio
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer
from aiokafka import ConsumerRebalanceListener as AioListener
from aiokafka.errors import KafkaError as AioKafkaError
from confluent_kafka import Consumer, KafkaException, TopicPartition
from kafka import ConsumerRebalanceListener, KafkaAdminClient, KafkaConsumer
from kafka import TopicPartition as KTopicPartition
from kafka.errors import KafkaError as KKafkaError
from kafka.protocol.consumer.group import JoinGroupRequest, JoinGroupResponse
from kafka.structs import OffsetAndMetadata

from tests.integration.kafka_clients import confluent_create_topic, confluent_produce
from tests.integration.node_process import NodeProcess
from tests.integration.waiting import wait_until

SESSION_MS = 6000
HEARTBEAT_MS = 500
DELAY_MS = 200


@pytest.fixture
def group_node(tmp_path: Path) -> Iterator[NodeProcess]:
    with NodeProcess(
        tmp_path / "data", "--group-initial-rebalance-delay-ms", str(DELAY_MS)
    ) as process:
        yield process


@dataclass
class GroupLog:
    """What every member saw, shared between member threads."""

    partitions: int
    lock: threading.Lock = field(default_factory=threading.Lock)
    owner: dict[int, str] = field(default_factory=dict)
    overlaps: list[str] = field(default_factory=list)
    consumed: list[tuple[str, int, int]] = field(default_factory=list)  # member, partition, offset

    def assigned(self, member: str, partitions: list[int]) -> None:
        with self.lock:
            for p in partitions:
                current = self.owner.get(p)
                if current is not None and current != member:
                    self.overlaps.append(f"partition {p} given to {member} while {current} owns it")
                self.owner[p] = member

    def revoked(self, member: str, partitions: list[int] | None = None) -> None:
        with self.lock:
            for p in list(self.owner) if partitions is None else partitions:
                if self.owner.get(p) == member:
                    del self.owner[p]

    def record(self, member: str, partition: int, offset: int) -> None:
        with self.lock:
            self.consumed.append((member, partition, offset))

    def owners(self) -> dict[int, str]:
        with self.lock:
            return dict(self.owner)

    def offsets(self) -> set[tuple[int, int]]:
        with self.lock:
            return {(p, o) for _, p, o in self.consumed}


class Member(threading.Thread):
    """One group member; `stop()` closes it (committing nothing more, leaving the group)."""

    def __init__(self, name: str, bootstrap: str, group: str, topic: str, log: GroupLog) -> None:
        super().__init__(name=name, daemon=True)
        self.bootstrap, self.group, self.topic, self.log = bootstrap, group, topic, log
        self.stopping = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.consume()
        except BaseException as exc:
            self.error = exc

    def consume(self) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        self.stopping.set()
        self.join(30)
        assert not self.is_alive(), f"{self.name} did not stop"
        assert self.error is None, f"{self.name} failed: {self.error!r}"


class ConfluentMember(Member):
    def consume(self) -> None:
        consumer = Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": self.group,
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                "session.timeout.ms": SESSION_MS,
                "heartbeat.interval.ms": HEARTBEAT_MS,
                "topic.metadata.refresh.interval.ms": 1000,
            }
        )

        def on_assign(_: Any, tps: list[TopicPartition]) -> None:
            self.log.assigned(self.name, [tp.partition for tp in tps])

        def on_revoke(_: Any, tps: list[TopicPartition]) -> None:
            self.log.revoked(self.name, [tp.partition for tp in tps])

        consumer.subscribe(
            [self.topic], on_assign=on_assign, on_revoke=on_revoke, on_lost=on_revoke
        )
        try:
            while not self.stopping.is_set():
                msg = consumer.poll(0.1)
                if msg is None or msg.error():
                    continue
                partition, offset = msg.partition(), msg.offset()
                assert partition is not None and offset is not None
                self.log.record(self.name, partition, offset)
                try:
                    consumer.commit(message=msg, asynchronous=False)
                except KafkaException:
                    pass  # lost the partition in a rebalance; its next owner re-reads it
        finally:
            # Polling has stopped, so nothing more is consumed from here on.
            self.log.revoked(self.name)
            consumer.close()


class _KafkaPythonListener(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, member: Member) -> None:
        self.member = member

    def on_partitions_revoked(self, revoked: Any) -> None:
        self.member.log.revoked(self.member.name, [tp.partition for tp in revoked])

    def on_partitions_assigned(self, assigned: Any) -> None:
        self.member.log.assigned(self.member.name, [tp.partition for tp in assigned])


class KafkaPythonMember(Member):
    def consume(self) -> None:
        consumer = KafkaConsumer(
            bootstrap_servers=self.bootstrap,
            group_id=self.group,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            session_timeout_ms=SESSION_MS,
            heartbeat_interval_ms=HEARTBEAT_MS,
        )
        consumer.subscribe([self.topic], listener=_KafkaPythonListener(self))
        try:
            while not self.stopping.is_set():
                for tp, records in consumer.poll(timeout_ms=100).items():
                    for record in records:
                        self.log.record(self.name, tp.partition, record.offset)
                        try:
                            consumer.commit({tp: OffsetAndMetadata(record.offset + 1, "", -1)})
                        except KKafkaError:
                            break  # rebalanced away; the rest of the batch is the next owner's
        finally:
            self.log.revoked(self.name)
            consumer.close()


class _AioListener(AioListener):  # type: ignore[misc]
    def __init__(self, member: Member) -> None:
        self.member = member

    async def on_partitions_revoked(self, revoked: Any) -> None:
        self.member.log.revoked(self.member.name, [tp.partition for tp in revoked])

    async def on_partitions_assigned(self, assigned: Any) -> None:
        self.member.log.assigned(self.member.name, [tp.partition for tp in assigned])


class AioKafkaMember(Member):
    def consume(self) -> None:
        asyncio.run(self._consume())

    async def _consume(self) -> None:
        consumer = AIOKafkaConsumer(
            bootstrap_servers=self.bootstrap,
            group_id=self.group,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            session_timeout_ms=SESSION_MS,
            heartbeat_interval_ms=HEARTBEAT_MS,
        )
        consumer.subscribe([self.topic], listener=_AioListener(self))
        await consumer.start()
        try:
            while not self.stopping.is_set():
                batches = await consumer.getmany(timeout_ms=100)
                for tp, records in batches.items():
                    for record in records:
                        self.log.record(self.name, tp.partition, record.offset)
                        try:
                            await consumer.commit({tp: record.offset + 1})
                        except AioKafkaError:
                            break
        finally:
            self.log.revoked(self.name)
            await consumer.stop()


MemberFactory = Callable[[str, str, str, str, GroupLog], Member]


def settled(log: GroupLog, members: list[Member]) -> Callable[[], bool]:
    """Every partition owned, and by exactly the running members (6 partitions >= members)."""
    names = {m.name for m in members}

    def check() -> bool:
        owners = log.owners()
        return len(owners) == log.partitions and set(owners.values()) == names

    return check


def produce(bootstrap: str, topic: str, start: int, count: int) -> dict[int, list[int]]:
    messages = [(f"k{i}".encode(), f"v{i}".encode()) for i in range(start, start + count)]
    return confluent_produce(bootstrap, topic, messages)


def as_set(acked: dict[int, list[int]]) -> set[tuple[int, int]]:
    return {(p, o) for p, offsets in acked.items() for o in offsets}


def committed(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    probe = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        tps = probe.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=10)
        return {tp.partition: tp.offset for tp in tps}
    finally:
        probe.close()


def end_offsets(acked: dict[int, list[int]], partitions: int) -> dict[int, int]:
    return {p: max(acked.get(p, [-1])) + 1 for p in range(partitions)}


MIXED: list[MemberFactory] = [ConfluentMember, KafkaPythonMember, AioKafkaMember, ConfluentMember]


@pytest.mark.parametrize(
    "factories",
    [[ConfluentMember] * 4, [KafkaPythonMember] * 4, [AioKafkaMember] * 4, MIXED],
    ids=["confluent", "kafka-python", "aiokafka", "mixed"],
)
def test_group_rebalances_as_members_come_and_go(
    group_node: NodeProcess, factories: list[MemberFactory]
) -> None:
    """Three members share six partitions, a fourth joins, the second leaves."""
    bootstrap, partitions = group_node.bootstrap, 6
    topic, group = "cg-members", "g-members"
    confluent_create_topic(bootstrap, topic, partitions)
    acked = as_set(produce(bootstrap, topic, 0, 300))
    log = GroupLog(partitions)
    members = [factories[i](f"m{i}", bootstrap, group, topic, log) for i in range(3)]
    try:
        for m in members:
            m.start()
        wait_until(settled(log, members), "3 members to share 6 partitions")
        wait_until(lambda: acked <= log.offsets(), "the first messages to be consumed")

        fourth = factories[3]("m3", bootstrap, group, topic, log)
        members.append(fourth)
        fourth.start()
        wait_until(settled(log, members), "4 members to share 6 partitions")
        acked |= as_set(produce(bootstrap, topic, 300, 200))
        wait_until(lambda: acked <= log.offsets(), "messages produced with 4 members")

        leaving = members.pop(1)
        leaving.stop()
        wait_until(settled(log, members), "3 remaining members to share 6 partitions")
        acked |= as_set(produce(bootstrap, topic, 500, 200))
        wait_until(lambda: acked <= log.offsets(), "messages produced after one left")
        counts = sorted(list(log.owners().values()).count(m.name) for m in members)
        assert counts == [2, 2, 2]
    finally:
        for m in members:
            m.stop()
    assert not log.overlaps, log.overlaps


def restart_keeps_committed_offsets(node: NodeProcess, factory: MemberFactory, tag: str) -> None:
    """Consume and commit everything, restart every member, and check they resume exactly
    where the group committed: nothing committed is delivered again, nothing is skipped."""
    bootstrap, partitions = node.bootstrap, 4
    topic, group = f"cg-restart-{tag}", f"g-restart-{tag}"
    confluent_create_topic(bootstrap, topic, partitions)
    first = produce(bootstrap, topic, 0, 200)
    log = GroupLog(partitions)
    members = [factory(f"{tag}-a{i}", bootstrap, group, topic, log) for i in range(2)]
    try:
        for m in members:
            m.start()
        wait_until(settled(log, members), "both members to own partitions")
        wait_until(lambda: as_set(first) <= log.offsets(), "the first messages to be consumed")
        expected = end_offsets(first, partitions)
        wait_until(
            lambda: committed(bootstrap, group, topic, partitions) == expected,
            "every consumed message to be committed",
        )
    finally:
        for m in members:
            m.stop()
    assert not log.overlaps, log.overlaps

    second = produce(bootstrap, topic, 200, 120)
    restarted = GroupLog(partitions)
    members = [factory(f"{tag}-b{i}", bootstrap, group, topic, restarted) for i in range(2)]
    try:
        for m in members:
            m.start()
        wait_until(settled(restarted, members), "both restarted members to own partitions")
        wait_until(lambda: as_set(second) <= restarted.offsets(), "the new messages")
        final = end_offsets({p: first.get(p, []) + second.get(p, []) for p in range(partitions)}, 4)
        wait_until(
            lambda: committed(bootstrap, group, topic, partitions) == final,
            "the new messages to be committed",
        )
    finally:
        for m in members:
            m.stop()
    assert not restarted.overlaps, restarted.overlaps
    redelivered = sorted((p, o) for _, p, o in restarted.consumed if o < expected[p])
    assert not redelivered, f"committed messages delivered again: {redelivered[:10]}"
    assert restarted.offsets() == as_set(second)


def test_confluent_group_resumes_from_committed_offsets(group_node: NodeProcess) -> None:
    restart_keeps_committed_offsets(group_node, ConfluentMember, "confluent")


def test_kafka_python_group_resumes_from_committed_offsets(group_node: NodeProcess) -> None:
    restart_keeps_committed_offsets(group_node, KafkaPythonMember, "kpy")


def test_aiokafka_group_resumes_from_committed_offsets(group_node: NodeProcess) -> None:
    restart_keeps_committed_offsets(group_node, AioKafkaMember, "aio")


def test_admin_lists_and_describes_groups(group_node: NodeProcess) -> None:
    bootstrap, topic, group = group_node.bootstrap, "cg-admin", "g-admin"
    confluent_create_topic(bootstrap, topic, 2)
    log = GroupLog(2)
    member = ConfluentMember("admin-0", bootstrap, group, topic, log)
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10000)
    try:
        member.start()
        wait_until(settled(log, [member]), "the member to own both partitions")
        assert {"group_id": group, "protocol_type": "consumer"} in admin.list_groups()
        described = admin.describe_groups([group, "no-such-group"])
        mine = described[group]
        assert (mine["group_state"], mine["protocol_type"]) == ("Stable", "consumer")
        assert mine["protocol_data"] in ("range", "roundrobin")
        [only] = mine["members"]
        # Metadata and assignment are the client's own bytes, passed through untouched.
        assert only["member_metadata"]["topics"] == [topic]
        assert only["member_assignment"]["assigned_partitions"] == [
            {"topic": topic, "partitions": [0, 1]}
        ]
        assert described["no-such-group"]["group_state"] == "Dead"
        # A standalone commit (generation -1, no member) is allowed for a group without
        # members, and OffsetFetch reports -1 where nothing was committed.
        probe = Consumer({"bootstrap.servers": bootstrap, "group.id": "g-standalone"})
        try:
            probe.commit(offsets=[TopicPartition(topic, 0, 7)], asynchronous=False)
            got = probe.committed([TopicPartition(topic, 0), TopicPartition(topic, 1)], timeout=10)
            assert [(tp.partition, tp.offset) for tp in got] == [(0, 7), (1, -1001)]
        finally:
            probe.close()
    finally:
        member.stop()
        admin.close()


def test_kafka_python_commit_metadata_limit(group_node: NodeProcess) -> None:
    bootstrap, topic = group_node.bootstrap, "cg-metadata"
    confluent_create_topic(bootstrap, topic, 1)
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap, group_id="g-meta", enable_auto_commit=False
    )
    tp = KTopicPartition(topic, 0)
    try:
        consumer.assign([tp])
        consumer.commit({tp: OffsetAndMetadata(3, "m" * 4096, -1)})
        assert consumer.committed(tp) == 3
        with pytest.raises(KKafkaError):
            consumer.commit({tp: OffsetAndMetadata(4, "m" * 4097, -1)})
        assert consumer.committed(tp) == 3
    finally:
        consumer.close()


def _join_request(member_id: str, correlation_id: int) -> bytes:
    request = JoinGroupRequest(
        group_id="g-raw",
        session_timeout_ms=SESSION_MS,
        rebalance_timeout_ms=60_000,
        member_id=member_id,
        group_instance_id=None,
        protocol_type="consumer",
        protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"")],
        version=5,
    )
    request.with_header(correlation_id=correlation_id, client_id="raw")
    return bytes(request.encode(header=True, framed=True))


def _read_join_response(sock: socket.socket) -> Any:
    def exactly(n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = sock.recv(n - len(data))
            assert chunk, "connection closed"
            data += chunk
        return data

    (size,) = struct.unpack(">i", exactly(4))
    body = exactly(size)
    return JoinGroupResponse.decode(body[4:], version=5)  # skip the correlation id


def test_shutdown_answers_a_held_join_at_once(tmp_path: Path) -> None:
    # A long initial delay keeps the join held until the node is told to stop.
    with NodeProcess(tmp_path / "data", "--group-initial-rebalance-delay-ms", "60000") as node:
        with socket.create_connection(("127.0.0.1", node.kafka_port), timeout=30) as sock:
            sock.sendall(_join_request("", 1))
            first = _read_join_response(sock)
            assert first.error_code == 79  # MEMBER_ID_REQUIRED
            sock.sendall(_join_request(first.member_id, 2))
            time.sleep(0.5)
            started = time.monotonic()
            assert node.process is not None
            node.process.send_signal(signal.SIGTERM)
            held = _read_join_response(sock)
            assert held.error_code == 15  # COORDINATOR_NOT_AVAILABLE: look elsewhere
            assert node.process.wait(30) == 0
            assert time.monotonic() - started < 5


def test_killed_member_expires_and_its_partitions_move(group_node: NodeProcess) -> None:
    bootstrap, topic, group, partitions = group_node.bootstrap, "cg-expiry", "g-expiry", 4
    confluent_create_topic(bootstrap, topic, partitions)
    script = (
        "import sys\n"
        "from confluent_kafka import Consumer\n"
        "c = Consumer({'bootstrap.servers': sys.argv[1], 'group.id': sys.argv[2],\n"
        f"  'session.timeout.ms': {SESSION_MS}, 'heartbeat.interval.ms': {HEARTBEAT_MS}}})\n"
        "c.subscribe([sys.argv[3]], on_assign=lambda c, ps: print('assigned', flush=True))\n"
        "while True:\n"
        "    c.poll(0.1)\n"
    )
    log = GroupLog(partitions)
    survivor = ConfluentMember("survivor", bootstrap, group, topic, log)
    doomed = subprocess.Popen(
        [sys.executable, "-c", script, bootstrap, group, topic],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert doomed.stdout is not None
        assert doomed.stdout.readline().strip() == "assigned"
        survivor.start()
        # Two members: the survivor gets half of the partitions.
        wait_until(lambda: len(log.owners()) == partitions // 2, "the survivor's first share")
        doomed.kill()  # no LeaveGroup: only the session timeout can notice
        killed = time.monotonic()
        wait_until(lambda: len(log.owners()) == partitions, "the survivor to own everything")
        # librdkafka's own rejoin adds up to a heartbeat interval on top of the session.
        assert time.monotonic() - killed < SESSION_MS / 1000 + 5
    finally:
        doomed.kill()
        doomed.wait(10)
        assert doomed.stdout is not None
        doomed.stdout.close()
        survivor.stop()
    assert not log.overlaps, log.overlaps
