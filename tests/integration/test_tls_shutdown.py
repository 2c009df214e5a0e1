"""SIGTERM while an acks=all producer writes over TLS: every request the node read is
answered before the connection closes (cancelling a TLS read can break the stream and lose
the answers: trio documents it for a read cancelled while the TLS layer must write), so
after a restart the log holds exactly the messages the client was told were delivered —
none acknowledged and lost, none stored but reported failed."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from tests.integration.node_process import NodeProcess
from tests.integration.security_support import write_tls_files

TOPIC = "tls-shutdown"


def _stored(config: dict[str, Any]) -> list[bytes]:
    consumer = Consumer({**config, "group.id": "check", "enable.auto.commit": False})
    try:
        _, high = consumer.get_watermark_offsets(TopicPartition(TOPIC, 0), timeout=10)
        consumer.assign([TopicPartition(TOPIC, 0, 0)])
        values: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(values) < high:
            assert time.monotonic() < deadline, f"read {len(values)} of {high}"
            msg = consumer.poll(0.5)
            if msg is not None:
                assert msg.error() is None, msg.error()
                values.append(msg.value() or b"")
        return values
    finally:
        consumer.close()


def test_sigterm_answers_in_flight_tls_produce_requests(tmp_path: Path) -> None:
    cert_file, key_file, ca_file = write_tls_files(tmp_path)
    tls = ["--kafka-tls-cert", str(cert_file), "--kafka-tls-key", str(key_file)]
    node = NodeProcess(tmp_path / "data", *tls, "--log-level", "DEBUG")
    config: dict[str, Any] = {
        "bootstrap.servers": node.bootstrap,
        "security.protocol": "SSL",
        "ssl.ca.location": str(ca_file),
    }
    try:
        node.start()
        admin = AdminClient(config)
        admin.create_topics([NewTopic(TOPIC, num_partitions=1)])[TOPIC].result(timeout=30)

        acked: list[bytes] = []
        failed: list[KafkaError] = []

        def report(err: KafkaError | None, msg: Any) -> None:
            if err is None:
                acked.append(msg.value())
            else:
                failed.append(err)

        producer = Producer(
            {
                **config,
                "acks": "all",
                "linger.ms": 2,
                # No resend: a request whose answer was lost must show up as a failure
                # here while its data sits in the log.
                "message.send.max.retries": 0,
                "message.timeout.ms": 5000,
            }
        )
        stop = threading.Event()

        def produce() -> None:
            i = 0
            while not stop.is_set():
                try:
                    producer.produce(TOPIC, value=f"v{i}".encode(), on_delivery=report)
                except BufferError:
                    pass
                producer.poll(0)
                i += 1
                time.sleep(0.0005)

        thread = threading.Thread(target=produce)
        thread.start()
        try:
            deadline = time.monotonic() + 30
            while len(acked) < 200:
                assert time.monotonic() < deadline, f"only {len(acked)} acked"
                time.sleep(0.05)
            assert node.stop(30) == 0
        finally:
            stop.set()
            thread.join(30)
        producer.flush(15)
        assert acked and failed, (len(acked), len(failed))

        log = node.log()
        assert "broken" not in log, [line for line in log.splitlines() if "broken" in line]
        node.start()
        stored = _stored(config)
        assert sorted(stored) == sorted(acked), (
            f"{len(set(acked) - set(stored))} acked but lost, "
            f"{len(set(stored) - set(acked))} stored but not acked"
        )
        assert len(stored) == len(set(stored))
    finally:
        if node.alive():
            node.stop(30)
