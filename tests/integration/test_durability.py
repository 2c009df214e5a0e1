"""What a producer saw acknowledged survives SIGTERM, and kill -9 with a torn log tail."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from confluent_kafka import Producer

from tests.integration.kafka_clients import confluent_consume_all, confluent_create_topic
from tests.integration.node_process import NodeProcess
from vdl.backends.segment.entry_codec import HEADER, HEADER_SIZE

PARTITIONS = 2


class BackgroundProducer:
    """Produces acks=all messages until stopped, remembering every acknowledged one."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.acked: dict[bytes, tuple[int, int]] = {}
        self._topic = topic
        self._producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "acks": "all",
                "enable.idempotence": True,
                "linger.ms": 2,
                "message.timeout.ms": 5000,
                "reconnect.backoff.max.ms": 200,
            }
        )
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _on_delivery(self, err: object, msg: object) -> None:
        if err is None:
            value = msg.value()  # type: ignore[attr-defined]
            self.acked[value] = (msg.partition(), msg.offset())  # type: ignore[attr-defined]

    def _run(self) -> None:
        i = 0
        while not self._stop.is_set():
            try:
                self._producer.produce(
                    self._topic,
                    key=str(i % 13).encode(),
                    value=f"msg-{i:08d}".encode(),
                    on_delivery=self._on_delivery,
                )
                i += 1
            except BufferError:
                pass
            self._producer.poll(0.001 if i % 50 == 0 else 0)

    def start(self) -> BackgroundProducer:
        self._thread.start()
        return self

    def wait_for_acks(self, count: int, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while len(self.acked) < count:
            assert time.monotonic() < deadline, f"only {len(self.acked)} acks"
            time.sleep(0.05)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)
        # Whatever cannot be delivered any more fails after message.timeout.ms.
        self._producer.flush(15)


def _assert_all_acked_present(node: NodeProcess, acked: dict[bytes, tuple[int, int]]) -> None:
    # More than was acknowledged may be stored (acks lost with the node): read until idle.
    consumed = confluent_consume_all(
        node.bootstrap, "durable", PARTITIONS, 10**9, timeout=90, idle=3
    )
    stored = {value: (partition, offset) for partition, offset, _, value in consumed}
    missing = [v for v in acked if v not in stored]
    assert not missing, f"{len(missing)} acknowledged messages lost, e.g. {missing[:3]}"
    moved = [v for v, where in acked.items() if stored[v] != where]
    assert not moved, f"{len(moved)} acknowledged messages at other offsets"


def test_sigterm_mid_produce_keeps_every_ack(tmp_path: Path) -> None:
    node = NodeProcess(tmp_path / "data").start()
    try:
        confluent_create_topic(node.bootstrap, "durable", PARTITIONS)
        producer = BackgroundProducer(node.bootstrap, "durable").start()
        producer.wait_for_acks(3000)
        assert node.stop() == 0, node.log()
        producer.stop()
        assert "stopped" in node.log()

        restarted = NodeProcess(tmp_path / "data", kafka_port=node.kafka_port).start()
        try:
            _assert_all_acked_present(restarted, producer.acked)
        finally:
            assert restarted.stop() == 0
    finally:
        node.kill()


def _data_end(path: Path) -> int:
    """End of the last entry of a segment file: a preallocated one is zeros after it."""
    data = path.read_bytes()
    at = 0
    while at + HEADER_SIZE <= len(data) and any(data[at : at + HEADER_SIZE]):
        at += HEADER_SIZE + HEADER.unpack_from(data, at)[1]
    return min(at, len(data))


def _tear_tail(data_dir: Path) -> Path:
    """Write half an entry's worth of junk right after the last entry of the newest file of
    a partition's log (over preallocated zeros, if any, where the next entry would go)."""
    stream_dir = data_dir / "streams" / "durable-0"
    files = sorted(
        (p for p in stream_dir.rglob("*") if p.is_file()), key=lambda p: p.stat().st_mtime
    )
    segments = [p for p in files if p.suffix == ".log"] or files
    target = segments[-1]
    end = _data_end(target) if target.suffix == ".log" else target.stat().st_size
    with open(target, "r+b") as fh:
        fh.seek(end)
        fh.write(b"\x13\x37" * 50)
    return target


def test_kill_9_mid_produce_keeps_every_ack_and_cuts_torn_tail(tmp_path: Path) -> None:
    node = NodeProcess(tmp_path / "data").start()
    try:
        confluent_create_topic(node.bootstrap, "durable", PARTITIONS)
        producer = BackgroundProducer(node.bootstrap, "durable").start()
        producer.wait_for_acks(3000)
        node.kill()
        producer.stop()
        _tear_tail(tmp_path / "data")

        restarted = NodeProcess(tmp_path / "data", kafka_port=node.kafka_port).start()
        try:
            _assert_all_acked_present(restarted, producer.acked)
            # The node appends after the cut tail as if nothing happened.
            again = BackgroundProducer(restarted.bootstrap, "durable").start()
            again.wait_for_acks(100)
            again.stop()
        finally:
            assert restarted.stop() == 0
    finally:
        node.kill()
