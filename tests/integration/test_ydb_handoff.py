"""A partition handed from one YDB reader to another under load is read once: with the
official SDK committing after processing, readers of one consumer on the three nodes of a
cluster come and go many times while messages keep arriving, and no message is processed
(its commit acknowledged) twice.

A hand-off is YDB's graceful stop (ydb_topic.proto, StreamReadMessage:
``stop_partition_session_request`` with ``graceful`` → ``stop_partition_session_response``):
the next reader's partition session starts only once that answer came (or the old reader
is gone), at the offset the old reader committed, read from a replica that has reached
that offset: a follower learns of a commit after its leader, and a reader starting on a
follower that lagged the node the old reader read from was sent back over the messages
the old one had processed and committed. A reader that never answers is told,
with a stop that is not graceful, before its partition moves on (and never while a commit
of it is being made durable), so no commit of it can land after the next reader started.

Both take a while (many rebalances; a stop timing out): they are `slow`."""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
import ydb
from kafka import KafkaProducer

from tests.integration.cluster_support import Cluster
from tests.integration.test_ydb_cluster_readers import (
    PARTITIONS,
    Reader,
    committed,
    create_topic,
    driver_for,
    produce,
)
from tests.integration.waiting import wait_until
from vdl.net.ydb.protos import ydb_topic_pb2

READ_METHOD = "/Ydb.Topic.V1.TopicService/StreamRead"
FromClient = ydb_topic_pb2.StreamReadMessage.FromClient
FromServer = ydb_topic_pb2.StreamReadMessage.FromServer
ROUNDS = 30  # readers replaced, one at a time, round-robin over the nodes


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    # Slow raft ticks: a follower hears of a commit at its leader's next append or
    # heartbeat, so between bursts of messages the followers lag their leader longer, and
    # a partition handed to a reader on a follower meets that lag more often.
    c = Cluster(Path(tmp_path_factory.mktemp("ydb-handoff")), "--raft-tick-ms", "250")
    try:
        c.start()
        yield c
    finally:
        c.stop()


class QuickReader(Reader):
    """A reader that commits each batch as soon as it has it (and waits for the
    acknowledgement): the next reader of a partition starts right after its last commit."""

    def _run(self) -> None:
        try:
            with driver_for(self._endpoint, discovery=False) as driver:
                reader: Any = driver.topic_client.reader(self._topic, consumer=self._consumer)
                try:
                    while not self._stop.is_set():
                        try:
                            batch = reader.receive_batch(max_messages=20, timeout=0.5)
                        except TimeoutError:
                            continue
                        messages = [(m.partition_id, m.offset) for m in batch.messages]
                        self.partitions.update(p for p, _ in messages)
                        try:
                            reader.commit_with_ack(batch, timeout=10)
                        except (ydb.TopicReaderPartitionExpiredError, TimeoutError):
                            self.uncertain.extend(messages)
                        else:
                            self.acked.extend(messages)
                finally:
                    with contextlib.suppress(Exception):
                        reader.close(timeout=10)
        except BaseException as exc:  # reported by the test
            self.errors.append(exc)


class Producer:
    """Kafka messages into every partition, round after round, until stopped; how many
    went to each partition (the topic is new: they are its offsets 0..n-1)."""

    def __init__(self, cluster: Cluster, topic: str) -> None:
        self.sent: Counter[int] = Counter()
        self.errors: list[BaseException] = []
        self._stop = threading.Event()
        self._producer = KafkaProducer(
            bootstrap_servers=cluster.bootstrap.split(","), acks="all", linger_ms=2
        )
        self._topic = topic
        self._thread = threading.Thread(target=self._run, name="producer", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                futures = [
                    self._producer.send(self._topic, value=b"m", partition=p)
                    for p in range(PARTITIONS)
                    for _ in range(5)
                ]
                for future in futures:
                    self.sent[future.get(timeout=60).partition] += 1
                # In bursts (pacing the load): between them a follower learns of the last
                # commit only at its leader's next heartbeat.
                time.sleep(0.2)
        except BaseException as exc:  # reported by the test
            self.errors.append(exc)

    def stop(self) -> dict[int, int]:
        self._stop.set()
        self._thread.join(60)
        self._producer.close()
        assert not self._thread.is_alive() and not self.errors, self.errors
        return {p: self.sent[p] for p in range(PARTITIONS)}


@pytest.mark.slow  # thirty rebalances
def test_many_handoffs_under_load_read_every_message_once(cluster: Cluster) -> None:
    topic, consumer = "/local/handoff", "handoff"
    create_topic(cluster, topic, consumer)
    producer = Producer(cluster, topic.rsplit("/", 1)[1])
    # The reader on each node; every reader there ever was.
    on = {
        i: QuickReader(f"r{i}", cluster.nodes[i].grpc_address, topic, consumer) for i in (1, 2, 3)
    }
    readers = list(on.values())
    sent: dict[int, int] = {}
    try:
        wait_until(lambda: all(r.partitions for r in readers), "every reader reading")
        for round_ in range(ROUNDS):
            node = round_ % 3 + 1
            enough = sum(len(r.acked) for r in readers) + 10
            on[node].stop()  # its partitions go to the other two, and come back:
            on[node] = QuickReader(
                f"r{node}.{round_}", cluster.nodes[node].grpc_address, topic, consumer
            )
            readers.append(on[node])
            # Some reading under the new shares before the next change.
            wait_until(
                lambda: sum(len(r.acked) for r in readers),
                "reading after a hand-off",
                done=enough.__lt__,
            )
        sent = producer.stop()
        wait_until(
            lambda: committed(cluster, topic, consumer),
            "everything committed",
            done=lambda offsets: offsets == sent,
            tolerate=(ydb.Error,),
        )
    finally:
        if not sent:
            producer.stop()
        for reader in on.values():
            reader.stop()
    for reader in readers:
        assert not reader.errors, (reader.name, reader.errors)
    counts = Counter(m for r in readers for m in r.acked)
    twice = sorted(m for m, n in counts.items() if n > 1)
    by = {m: [r.name for r in readers if m in r.acked] for m in twice[:10]}
    assert not twice, f"processed more than once (by): {by}"
    doubtful = {m for r in readers for m in r.uncertain}
    everything = {(p, o) for p, n in sent.items() for o in range(n)}
    missing = sorted(everything - counts.keys() - doubtful)
    assert not missing, f"never processed: {missing[:20]}"


class DeafReader:
    """A StreamRead client, protocol message by message, that starts every partition it
    is given and never answers a stop: what it was told, per partition session."""

    def __init__(self, endpoint: str, topic: str, consumer: str) -> None:
        self.started: dict[int, int] = {}  # partition session -> partition
        self.stops: list[tuple[int, bool]] = []  # (partition session, graceful)
        self.errors: list[BaseException] = []
        self._requests: queue.Queue[FromClient | None] = queue.Queue()
        init = FromClient()
        init.init_request.consumer = consumer
        init.init_request.topics_read_settings.add(path=topic)
        credit = FromClient()
        credit.read_request.bytes_size = 1 << 20
        self._requests.put(init)
        self._requests.put(credit)
        self._channel = grpc.insecure_channel(endpoint)
        call = self._channel.stream_stream(
            READ_METHOD,
            request_serializer=FromClient.SerializeToString,
            response_deserializer=FromServer.FromString,
        )
        self._replies = call(
            iter(self._requests.get, None), metadata=[("x-ydb-database", "/local")]
        )
        self._thread = threading.Thread(target=self._run, name="deaf", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            for reply in self._replies:
                kind = reply.WhichOneof("server_message")
                if kind == "start_partition_session_request":
                    session = reply.start_partition_session_request.partition_session
                    self.started[session.partition_session_id] = session.partition_id
                    answer = FromClient()
                    answer.start_partition_session_response.partition_session_id = (
                        session.partition_session_id
                    )
                    self._requests.put(answer)
                elif kind == "stop_partition_session_request":
                    stop = reply.stop_partition_session_request
                    self.stops.append((stop.partition_session_id, stop.graceful))
        except grpc.RpcError as exc:
            if exc.code() != grpc.StatusCode.CANCELLED:
                self.errors.append(exc)

    def close(self) -> None:
        self._replies.cancel()
        self._requests.put(None)
        self._thread.join(30)
        self._channel.close()


@pytest.mark.slow  # a reader that does not answer loses its partitions after STOP_TIMEOUT_S
def test_a_reader_that_never_answers_a_stop_is_told_before_its_partition_moves(
    cluster: Cluster,
) -> None:
    topic, consumer = "/local/handoff-deaf", "deaf"
    create_topic(cluster, topic, consumer)
    produce(cluster, topic.rsplit("/", 1)[1], 50)
    sent = dict.fromkeys(range(PARTITIONS), 50)
    deaf = DeafReader(cluster.nodes[1].grpc_address, topic, consumer)
    reader: QuickReader | None = None
    try:
        wait_until(lambda: len(deaf.started), "the deaf reader started", done=PARTITIONS.__eq__)
        reader = QuickReader("r2", cluster.nodes[2].grpc_address, topic, consumer)
        # The reader that joined takes half: the deaf one is asked to stop those, and once
        # it has not answered in time it is told (not gracefully) before they move on.
        graceful = wait_until(
            lambda: {s for s, g in deaf.stops if g},
            "graceful stops",
            done=lambda s: len(s) == PARTITIONS // 2,
        )
        wait_until(
            lambda: {s for s, g in deaf.stops if not g},
            "the stops made final",
            done=graceful.__le__,
        )
        moved = {deaf.started[s] for s in graceful}
        wait_until(
            lambda: committed(cluster, topic, consumer),
            "what moved read by the other reader",
            done=lambda offsets: all(offsets.get(p) == sent[p] for p in moved),
            tolerate=(ydb.Error,),
        )
    finally:
        if reader is not None:
            reader.stop()
        deaf.close()
    assert reader is not None
    assert not deaf.errors and not reader.errors, (deaf.errors, reader.errors)
    assert reader.partitions == moved
