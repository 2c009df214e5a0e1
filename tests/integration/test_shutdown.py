"""Shutdown answers held long polls instead of waiting out their max_wait."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from kafka import KafkaConsumer, TopicPartition

from tests.integration.kafka_clients import kafka_python_create_topic
from tests.integration.node_process import NodeProcess

LONG_POLL_MS = 60_000


def test_sigterm_answers_a_held_fetch(tmp_path: Path) -> None:
    node = NodeProcess(tmp_path / "data").start()
    try:
        kafka_python_create_topic(node.bootstrap, "quiet", 1)
        consumer = KafkaConsumer(
            bootstrap_servers=node.bootstrap,
            group_id=None,
            fetch_max_wait_ms=LONG_POLL_MS,
            request_timeout_ms=LONG_POLL_MS + 30_000,
        )
        tp = TopicPartition("quiet", 0)
        consumer.assign([tp])
        consumer.seek_to_end(tp)
        stop = threading.Event()

        def poll() -> None:
            while not stop.is_set():
                consumer.poll(timeout_ms=200)

        poller = threading.Thread(target=poll, daemon=True)
        poller.start()
        time.sleep(2)  # a fetch is now held for up to a minute
        started = time.monotonic()
        assert node.stop(timeout=LONG_POLL_MS / 1000) == 0, node.log()
        # Well under the held fetch's max_wait: the node did not wait it out.
        assert time.monotonic() - started < LONG_POLL_MS / 1000 / 2
        stop.set()
        poller.join(10)
        consumer.close(timeout_ms=1000)
    finally:
        node.kill()
