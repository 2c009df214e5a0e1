"""A background acks=all idempotent producer for tests that break nodes under load: it
sends numbered messages until stopped and remembers where each acknowledged one went."""

from __future__ import annotations

import threading
import time

from confluent_kafka import Producer


class AckedProducer:
    def __init__(
        self,
        bootstrap: str,
        topic: str,
        *,
        partitions: int | None = None,
        message_timeout_ms: int = 120000,
        poll_s: float = 0.002,
    ) -> None:
        """`partitions`: spread messages round robin over that many; None lets the client
        pick (every message of an unkeyed producer may then land on one partition)."""
        self.acked: dict[bytes, tuple[int, int]] = {}  # value -> (partition, offset)
        self.errors: list[str] = []
        self._topic = topic
        self._partitions = partitions
        self._poll_s = poll_s
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "acks": "all",
                "enable.idempotence": True,
                "linger.ms": 5,
                "message.timeout.ms": message_timeout_ms,
                "topic.metadata.refresh.interval.ms": 500,
                "reconnect.backoff.max.ms": 500,
            }
        )
        self._thread = threading.Thread(target=self._run)

    def _on_delivery(self, err: object, msg: object) -> None:
        with self._lock:
            if err is None:
                self.acked[msg.value()] = (msg.partition(), msg.offset())  # type: ignore[attr-defined]
            else:
                self.errors.append(str(err))

    def _run(self) -> None:
        sent = 0
        while not self._stop.is_set():
            value = b"m%08d" % sent
            try:
                if self._partitions is None:
                    self._producer.produce(self._topic, value=value, on_delivery=self._on_delivery)
                else:
                    self._producer.produce(
                        self._topic,
                        value=value,
                        partition=sent % self._partitions,
                        on_delivery=self._on_delivery,
                    )
                sent += 1
            except BufferError:
                pass
            self._producer.poll(self._poll_s)

    def count(self) -> int:
        with self._lock:
            return len(self.acked)

    def wait_acks(self, more: int, timeout: float = 60) -> None:
        target = self.count() + more
        deadline = time.monotonic() + timeout
        while self.count() < target:
            assert time.monotonic() < deadline, f"acks stalled at {self.count()}: {self.errors[:3]}"
            time.sleep(0.05)

    def __enter__(self) -> AckedProducer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def finish(self, timeout: float = 120) -> None:
        """Every message sent is acknowledged or failed (failures stay in `errors`)."""
        assert self._producer.flush(timeout) == 0, "messages still unacknowledged"


class NumberedProducer:
    """An acks=all idempotent producer the test drives itself: `produce(n)` sends the next
    n numbered messages, and `acked` maps each acknowledged value to its offset."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.acked: dict[bytes, int] = {}
        self.errors: list[str] = []
        self.sent = 0
        self._topic = topic
        self._lock = threading.Lock()
        self._producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "acks": "all",
                "enable.idempotence": True,
                "linger.ms": 5,
                "message.timeout.ms": 60000,
                "topic.metadata.refresh.interval.ms": 1000,
            }
        )

    def _on_delivery(self, err: object, msg: object) -> None:
        with self._lock:
            if err is None:
                self.acked[msg.value()] = msg.offset()  # type: ignore[attr-defined]
            else:
                self.errors.append(str(err))

    def produce(self, count: int) -> None:
        for _ in range(count):
            value = b"m%06d" % self.sent
            self.sent += 1
            while True:
                try:
                    self._producer.produce(self._topic, value=value, on_delivery=self._on_delivery)
                    break
                except BufferError:
                    self._producer.poll(0.05)
            self._producer.poll(0)
            time.sleep(0.001)

    def flush(self, timeout: float) -> int:
        """Messages still unacknowledged after `timeout` seconds."""
        return int(self._producer.flush(timeout))
