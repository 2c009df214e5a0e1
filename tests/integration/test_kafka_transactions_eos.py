"""Exactly-once consume-transform-produce on three real nodes while a nemesis kills -9 the
partition leaders and the transaction coordinator (the metadata group's leader).

An idempotent producer writes numbered records to an input topic. A confluent-kafka loop
reads it with read_committed, writes one output record per input record inside a
transaction, sends the consumed offsets in the same transaction (KIP-447) and commits;
one attempt in four it aborts instead, after its records are in the log, and rewinds
to the group's committed offsets as an application would. Errors are handled the way
librdkafka documents: retriable ones are retried, abortable ones abort and rewind, fatal
ones replace the producer (whose InitProducerId finishes or aborts what the old one left).
The history is checked by tests/integration/eos_checker.py: every input record exactly once
in the read_committed output, none from aborted attempts, committed attempts whole, input
order kept. The read_uncommitted view must hold records of aborted attempts, so the
committed view really filtered something.

Short in the default suite, minutes long under `-m slow`; figures are printed (-s).
"""

from __future__ import annotations

import random
import socket
import struct
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)
from kafka import KafkaConsumer
from kafka import TopicPartition as KTopicPartition
from kafka.errors import KafkaError as KafkaPyError
from kafka.protocol.consumer import FetchRequest, FetchResponse
from kafka.record import MemoryRecords

from tests.integration.cluster_support import Cluster, group0_leader
from tests.integration.eos_checker import (
    EosHistory,
    EosVerdict,
    InputKey,
    Outcome,
    OutputRecord,
    check,
    output_value,
)
from tests.integration.waiting import wait_until

PARTITIONS = 2
ABORT_EVERY = 4  # attempts 2, 6, 10, ... abort on purpose
# Long enough for a coordinator failover and a Raft election on a busy 2-core machine.
CLIENT_WAIT_S = 60.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = Cluster(tmp_path_factory.mktemp("eos"))
    try:
        c.start()
        yield c
    finally:
        c.stop()


@dataclass(frozen=True)
class Names:
    source: str
    sink: str
    group: str
    transactional_id: str

    @classmethod
    def of(cls, run: str) -> Names:
        return cls(f"eos-in-{run}", f"eos-out-{run}", f"eos-group-{run}", f"eos-tx-{run}")


def _error(exc: KafkaException) -> KafkaError:
    error = exc.args[0]
    assert isinstance(error, KafkaError), exc
    return error


def _retry(what: str, call: Callable[[], object], notes: list[str]) -> None:
    """Call until it returns, while it fails with a retriable error (librdkafka's advice
    for init_transactions, commit_transaction and abort_transaction)."""
    deadline = time.monotonic() + CLIENT_WAIT_S
    while True:
        try:
            call()
            return
        except KafkaException as exc:
            error = _error(exc)
            if not error.retriable() or time.monotonic() > deadline:
                raise
            notes.append(f"{what}: {error.name()} (retried)")


def _init_call(producer: Producer) -> Callable[[], object]:
    return lambda: producer.init_transactions(10)


@dataclass
class Processor:
    """The consume-transform-produce loop, run in its own thread."""

    bootstrap: str
    names: Names
    history: EosHistory = field(default_factory=EosHistory)
    positions: dict[int, int] = field(default_factory=dict)  # the group's, as last known
    notes: list[str] = field(default_factory=list)
    ended_at: dict[int, float] = field(default_factory=dict)  # attempt -> monotonic time
    producers: int = 0
    deliberate_aborts: int = 0
    failure: BaseException | None = None

    def _producer(self) -> Producer:
        deadline = time.monotonic() + CLIENT_WAIT_S
        while True:
            producer = Producer(
                {
                    "bootstrap.servers": self.bootstrap,
                    "transactional.id": self.names.transactional_id,
                    "transaction.timeout.ms": 60000,
                    "linger.ms": 5,
                    "topic.metadata.refresh.interval.ms": 1000,
                    "reconnect.backoff.max.ms": 500,
                }
            )
            self.producers += 1
            try:
                _retry("init_transactions", _init_call(producer), self.notes)
                return producer
            except KafkaException as exc:
                self.notes.append(f"init_transactions: {_error(exc).name()} (new producer)")
                assert time.monotonic() < deadline, "no producer could init its transactions"

    def _abort(self, producer: Producer, commit_asked: bool) -> tuple[Outcome, bool]:
        try:
            _retry("abort_transaction", lambda: producer.abort_transaction(10), self.notes)
            return Outcome.ABORTED, True
        except KafkaException as exc:
            self.notes.append(f"abort_transaction: {_error(exc).name()}")
            return (Outcome.UNKNOWN if commit_asked else Outcome.NOT_COMMITTED), False

    def _attempt(
        self, producer: Producer, consumer: Consumer, attempt: int, messages: list[Message]
    ) -> tuple[Outcome, bool]:
        """One transaction over `messages`: (its outcome, whether the producer is usable)."""
        positions: dict[int, int] = {}
        try:
            producer.begin_transaction()
            for msg in messages:
                partition, offset, value = msg.partition(), msg.offset(), msg.value()
                assert partition is not None and offset is not None and value is not None
                while True:
                    try:
                        producer.produce(
                            self.names.sink,
                            value=output_value(partition, offset, attempt, value),
                            partition=partition,
                        )
                        break
                    except BufferError:
                        producer.poll(0.05)
                self.history.wrote(attempt, (partition, offset))
                positions[partition] = offset + 1
            producer.send_offsets_to_transaction(
                [TopicPartition(self.names.source, p, o) for p, o in positions.items()],
                consumer.consumer_group_metadata(),
                30,
            )
            if attempt % ABORT_EVERY == 2:
                producer.flush(30)  # its records are in the log before the abort
                producer.abort_transaction(30)
                self.deliberate_aborts += 1
                return Outcome.ABORTED, True
        except KafkaException as exc:
            error = _error(exc)
            self.notes.append(f"attempt {attempt}: {error.name()} before commit")
            if error.fatal():
                return Outcome.NOT_COMMITTED, False
            return self._abort(producer, commit_asked=False)
        try:
            _retry("commit_transaction", lambda: producer.commit_transaction(10), self.notes)
        except KafkaException as exc:
            error = _error(exc)
            self.notes.append(f"commit_transaction: {error.name()}")
            if error.txn_requires_abort():
                return self._abort(producer, commit_asked=True)
            return Outcome.UNKNOWN, False
        self.positions = {**self.positions, **positions}  # replaced whole: read by the test
        return Outcome.COMMITTED, True

    def _rewind(self, consumer: Consumer) -> None:
        """Go back to the group's committed offsets, as after any failed transaction."""
        wanted = [TopicPartition(self.names.source, p) for p in range(PARTITIONS)]
        deadline = time.monotonic() + CLIENT_WAIT_S
        while True:
            try:
                committed = consumer.committed(wanted, 10)
                if all(tp.error is None for tp in committed):
                    break
                self.notes.append(f"committed: {[tp.error for tp in committed]}")
            except KafkaException as exc:
                self.notes.append(f"committed: {_error(exc).name()}")
            assert time.monotonic() < deadline, "the group's offsets could not be read"
        self.positions = {tp.partition: tp.offset for tp in committed if tp.offset >= 0}
        consumer.unassign()
        consumer.assign(
            [
                TopicPartition(tp.topic, tp.partition, tp.offset if tp.offset >= 0 else 0)
                for tp in committed
            ]
        )

    def run(self, stop: threading.Event) -> None:
        try:
            self._run(stop)
        except BaseException as exc:
            self.failure = exc

    def _run(self, stop: threading.Event) -> None:
        consumer = Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": self.names.group,
                "isolation.level": "read_committed",
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "topic.metadata.refresh.interval.ms": 1000,
                "reconnect.backoff.max.ms": 500,
            }
        )
        consumer.assign([TopicPartition(self.names.source, p) for p in range(PARTITIONS)])
        producer = self._producer()
        try:
            while not stop.is_set():
                messages = [m for m in consumer.consume(500, 0.1) if m.error() is None]
                if not messages:
                    continue
                attempt = len(self.history.attempts) + 1
                self.history.begin(attempt)
                outcome, usable = self._attempt(producer, consumer, attempt, messages)
                self.history.end(attempt, outcome)
                self.ended_at[attempt] = time.monotonic()
                if not usable:
                    producer = self._producer()
                if outcome is not Outcome.COMMITTED:
                    self._rewind(consumer)
        finally:
            consumer.close()


def _input_writer(bootstrap: str, topic: str, stop: threading.Event, rate: float) -> None:
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 5,
            "message.timeout.ms": 120000,
            "topic.metadata.refresh.interval.ms": 1000,
            "reconnect.backoff.max.ms": 500,
        }
    )
    seq = 0
    while not stop.is_set():
        try:
            producer.produce(topic, value=f"{seq:09d}".encode(), partition=seq % PARTITIONS)
        except BufferError:
            producer.poll(0.05)
            continue
        seq += 1
        producer.poll(0)
        time.sleep(1 / rate)
    assert producer.flush(150) == 0, "input records left undelivered"


def _no_node_exited(cluster: Cluster, killed: int | None = None) -> None:
    """Every node we did not kill is running: one that exited on its own failed the run."""
    for node_id, node in cluster.nodes.items():
        if node_id != killed and not node.alive():
            tail = "\n".join(node.log().splitlines()[-30:])
            raise AssertionError(f"node {node_id} exited on its own:\n{tail}")


def _nemesis(
    cluster: Cluster,
    names: Names,
    until: float,
    kills: int,
    rng: random.Random,
    log: list[str],
    began: float,
) -> None:
    """Kill -9 in turn the transaction coordinator, a leader of the output topic and a
    leader of the input topic; restart each after a pause. At least `kills` kills, and on
    until `until`. Times in `log` count from `began`."""
    turn = 0
    while turn < kills or time.monotonic() < until:
        _no_node_exited(cluster)
        kind = ("coordinator", "output leader", "input leader")[turn % 3]
        partition = (turn // 3) % PARTITIONS
        if kind == "coordinator":
            victim = wait_until(
                lambda: group0_leader(next(n for n in cluster.nodes.values() if n.alive())),
                "a metadata group leader",
                done=lambda leader: leader > 0 and cluster.nodes[leader].alive(),
                tolerate=(OSError, KeyError, ValueError),
            )
        else:
            topic = names.source if kind == "input leader" else names.sink
            victim = cluster.wait_for_leader(topic, partition)
        cluster.nodes[victim].kill()
        down = rng.uniform(0.3, 1.0)
        what = kind if kind == "coordinator" else f"{kind} of p{partition}"
        at = time.monotonic() - began
        log.append(f"t={at:.1f}s killed node {victim} ({what}) for {down:.1f}s")
        time.sleep(down)
        _no_node_exited(cluster, killed=victim)
        cluster.nodes[victim].start()
        turn += 1
        if turn < kills or time.monotonic() < until:
            time.sleep(rng.uniform(0.5, 1.5))


def _end_offsets(bootstrap: str, topic: str, isolation: str) -> dict[int, int]:
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap, isolation_level=isolation, request_timeout_ms=10000
    )
    tps = [KTopicPartition(topic, p) for p in range(PARTITIONS)]

    def ends() -> dict[int, int]:
        return {tp.partition: int(o) for tp, o in consumer.end_offsets(tps, 10000).items()}

    try:
        # kafka-python's end_offsets leaves out a partition whose leader its metadata does
        # not know yet (a node just killed and restarted) and then fails on it with
        # KeyError: ask again until every partition has a leader.
        return wait_until(ends, f"{topic} end offsets", tolerate=(KeyError,))
    finally:
        consumer.close()


def _read_to(
    bootstrap: str, topic: str, isolation: str, ends: dict[int, int]
) -> dict[int, list[tuple[int, bytes]]]:
    """Every record below `ends` in each partition, from the beginning, with `isolation`:
    done at a partition's end-of-partition event at or past its end."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"eos-check-{topic}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": isolation,
        }
    )
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    read: dict[int, list[tuple[int, bytes]]] = defaultdict(list)
    reached: set[int] = set()

    def step() -> None:
        for msg in consumer.consume(1000, 0.2):
            partition, offset = msg.partition(), msg.offset()
            assert partition is not None and offset is not None
            error = msg.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF and offset >= ends[partition]:
                    reached.add(partition)
                continue
            value = msg.value()
            assert value is not None
            read[partition].append((offset, value))

    try:
        wait_until(lambda: len(reached) == PARTITIONS, f"{topic} read to {ends}", step=step)
    finally:
        consumer.close()
    return read


@dataclass(frozen=True)
class Run:
    verdict: EosVerdict
    kills: int
    aborted_in_log: int  # records of aborted attempts that read_uncommitted returns


def _print_run(
    seed: int, seconds: float, processor: Processor, nemesis_log: list[str], aborted_in_log: int
) -> None:
    print(
        f"\nkafka transactions EOS: seed {seed}, {len(nemesis_log)} kills in {seconds:.1f}s, "
        f"{len(processor.history.attempts)} attempts, {processor.producers} producer "
        f"instances, {processor.deliberate_aborts} deliberate aborts, {aborted_in_log} "
        "aborted records in the log"
    )
    for line in nemesis_log:
        print("  " + line)
    notes = Counter(processor.notes)
    for note, count in notes.most_common(15):
        print(f"  client x{count}: {note}")


def _fetch_raw(port: int, topic: str, partition: int, offset: int, isolation: int) -> Any:
    """One Fetch v11 of `topic`/`partition` from `offset`, as the node answers it."""
    request = FetchRequest(
        replica_id=-1,
        max_wait_ms=0,
        min_bytes=0,
        max_bytes=1 << 20,
        isolation_level=isolation,
        session_id=0,
        session_epoch=-1,
        topics=[
            FetchRequest.FetchTopic(
                topic=topic,
                partitions=[
                    FetchRequest.FetchTopic.FetchPartition(
                        partition=partition,
                        current_leader_epoch=-1,
                        fetch_offset=offset,
                        log_start_offset=-1,
                        partition_max_bytes=1 << 20,
                    )
                ],
            )
        ],
        forgotten_topics_data=[],
        rack_id="",
        version=11,
    )
    request.with_header(correlation_id=1, client_id="eos-diagnosis")
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(bytes(request.encode(header=True, framed=True)))
        size = struct.unpack(">i", sock.recv(4, socket.MSG_WAITALL))[0]
        payload = sock.recv(size, socket.MSG_WAITALL)
    return FetchResponse.decode(payload[4:], version=11).responses[0].partitions[0]


def _print_layout(cluster: Cluster, topic: str, partition: int, start: int, end: int) -> None:
    """The batches of offsets [start, end) as the partition's leader stores them (control
    batches too), and the aborted transactions it names to read_committed fetches."""
    leader = cluster.wait_for_leader(topic, partition)
    port = cluster.nodes[leader].kafka_port
    offset = start
    print(f"  {topic}-{partition} on its leader, node {leader}, from {start}:")
    while offset < end:
        answer = _fetch_raw(port, topic, partition, offset, isolation=0)
        records = MemoryRecords(bytes(answer.records or b""))
        batch = records.next_batch()
        if batch is None:
            break
        while batch is not None and offset < end:
            kind = "data"
            if batch.is_control_batch:
                key = next(iter(batch)).key or b""
                kind = {0: "ABORT", 1: "COMMIT"}.get(struct.unpack(">hh", key[:4])[1], "control")
            txn = "txn" if batch.is_transactional else "plain"
            print(
                f"    {batch.base_offset}..{batch.last_offset} {txn} {kind} "
                f"pid {batch.producer_id} epoch {batch.producer_epoch}"
            )
            offset = batch.next_offset
            batch = records.next_batch()
    committed = _fetch_raw(port, topic, partition, start, isolation=1)
    aborted = [(a.producer_id, a.first_offset) for a in committed.aborted_transactions or []]
    print(f"    read_committed from {start}: aborted_transactions {aborted}")
    print(f"    lso {committed.last_stable_offset}, hw {committed.high_watermark}")


def _print_offenders(
    cluster: Cluster,
    sink: str,
    processor: Processor,
    output: list[OutputRecord],
    everything: dict[int, list[tuple[int, bytes]]],
    started: float,
) -> None:
    """Where the records of each wrongly visible attempt sit, and when it ended."""
    history = processor.history
    shown: dict[int, int] = defaultdict(int)
    for r in output:
        shown[r.attempt] += 1
    bad = sorted(
        number
        for number, attempt in history.attempts.items()
        if (attempt.outcome is not Outcome.COMMITTED and shown[number])
        or (attempt.outcome is Outcome.COMMITTED and shown[number] < len(attempt.records))
    )
    for attempt in bad[:3]:
        ended = processor.ended_at.get(attempt, started) - started
        outcome = history.attempts[attempt].outcome
        print(f"  attempt {attempt} ({outcome}) ended at t={ended:.1f}s from the start")
        for p, records in sorted(everything.items()):
            offsets = [o for o, v in records if OutputRecord.parse(p, o, v).attempt == attempt]
            seen = [r.offset for r in output if r.partition == p and r.attempt == attempt]
            if offsets:
                print(f"    p{p}: in the log at {offsets[0]}..{offsets[-1]}, shown {len(seen)}")
                _print_layout(cluster, sink, p, max(0, offsets[0] - 60), offsets[-1] + 60)


def run_eos(cluster: Cluster, run: str, chaos_s: float, kills: int, rate: float, seed: int) -> Run:
    names = Names.of(run)
    for topic in (names.source, names.sink):
        cluster.create_topic(topic, PARTITIONS)
        for p in range(PARTITIONS):
            cluster.wait_for_leader(topic, p)
    rng = random.Random(seed)
    processor = Processor(cluster.bootstrap, names)
    stop_input, stop_processing = threading.Event(), threading.Event()
    writer = threading.Thread(
        target=_input_writer, args=(cluster.bootstrap, names.source, stop_input, rate)
    )
    loop = threading.Thread(target=processor.run, args=(stop_processing,))
    writer.start()
    loop.start()
    nemesis_log: list[str] = []
    started = time.monotonic()

    def pause() -> None:
        _no_node_exited(cluster)
        assert processor.failure is None, processor.failure
        time.sleep(0.5)

    def caught_up() -> bool:
        ends = _end_offsets(cluster.bootstrap, names.source, "read_uncommitted")
        return processor.positions == ends

    try:
        wait_until(
            lambda: processor.history.count(Outcome.COMMITTED) > 0, "a first commit", step=pause
        )
        _nemesis(cluster, names, time.monotonic() + chaos_s, kills, rng, nemesis_log, started)
        stop_input.set()
        writer.join(180)
        assert not writer.is_alive(), "the input writer did not finish"
        wait_until(
            caught_up,
            "the loop caught up with its input",
            timeout=120,
            tolerate=(KafkaException, KafkaPyError),
            step=pause,
        )
    except BaseException:
        _print_run(seed, time.monotonic() - started, processor, nemesis_log, -1)
        raise
    finally:
        stop_input.set()
        stop_processing.set()
        for node in cluster.nodes.values():
            if not node.alive():
                node.start()
        writer.join(180)
        loop.join(180)
    assert not loop.is_alive(), "the loop did not finish"
    if processor.failure is not None:
        raise processor.failure
    # Every marker written and no transaction open: the committed end is the log's end.
    out_ends = wait_until(
        lambda: _end_offsets(cluster.bootstrap, names.sink, "read_committed"),
        "every output marker",
        done=lambda ends: ends == _end_offsets(cluster.bootstrap, names.sink, "read_uncommitted"),
        tolerate=(KafkaPyError,),
    )
    in_ends = _end_offsets(cluster.bootstrap, names.source, "read_uncommitted")
    source = _read_to(cluster.bootstrap, names.source, "read_uncommitted", in_ends)
    inputs: dict[InputKey, bytes] = {
        (p, offset): value for p, records in source.items() for offset, value in records
    }
    committed_view = _read_to(cluster.bootstrap, names.sink, "read_committed", out_ends)
    output = [
        OutputRecord.parse(p, offset, value)
        for p in sorted(committed_view)
        for offset, value in committed_view[p]
    ]
    verdict = check(processor.history, inputs, output)
    everything = _read_to(cluster.bootstrap, names.sink, "read_uncommitted", out_ends)
    aborted_in_log = sum(
        1
        for records in everything.values()
        for offset, value in records
        if processor.history.attempts[OutputRecord.parse(0, offset, value).attempt].outcome
        is Outcome.ABORTED
    )
    _print_run(seed, time.monotonic() - started, processor, nemesis_log, aborted_in_log)
    print(verdict.table())
    if not verdict.ok:
        _print_offenders(cluster, names.sink, processor, output, everything, started)
    assert verdict.ok, verdict.table()
    assert verdict.committed > 0 and verdict.aborted > 0 and nemesis_log
    assert aborted_in_log > 0, "no aborted record reached the log: the filter went untested"
    return Run(verdict, len(nemesis_log), aborted_in_log)


def test_exactly_once_through_leader_and_coordinator_kills(cluster: Cluster) -> None:
    """Two kills: the coordinator, then an output partition's leader."""
    run_eos(cluster, "short", chaos_s=0, kills=2, rate=150, seed=int(time.time()))


@pytest.mark.slow
def test_exactly_once_through_leader_and_coordinator_kills_long(cluster: Cluster) -> None:
    run_eos(cluster, "long", chaos_s=240, kills=3, rate=300, seed=int(time.time()))
