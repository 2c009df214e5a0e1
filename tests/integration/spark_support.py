"""A local SparkSession for the Spark adapter tests: started once per module, fully stopped.

Starting the JVM costs 6-9 s and the first query another ~10 s, so each test module shares one
session. Teardown stops the session *and* the py4j gateway JVM, so no JVM outlives its module.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

# Set before pyspark launches anything (here, or in the environment of a Spark process a test
# starts): the workers must run this interpreter (it has pyarrow, confluent-kafka and vdl), and
# loopback only.
SPARK_ENV = {"PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}

Record = tuple[bytes | None, bytes | None]


def read_topic(bootstrap: str, topic: str, partitions: int) -> list[tuple[Record, list[Any]]]:
    """Everything in the topic now, with headers, read by a plain Kafka consumer."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "spark-test-reader",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    out: list[tuple[Record, list[Any]]] = []
    at_end: set[int] = set()
    deadline = time.monotonic() + 60
    try:
        while len(at_end) < partitions and time.monotonic() < deadline:
            for message in consumer.consume(1000, 0.5):
                partition = message.partition()
                assert partition is not None
                if message.error() is not None:
                    at_end.add(partition)
                    continue
                at_end.discard(partition)
                out.append(((message.key(), message.value()), list(message.headers() or [])))
    finally:
        consumer.close()
    assert len(at_end) == partitions, f"{topic}: not every partition read to its end in 60 s"
    return out


@contextmanager
def local_spark(workdir: Path) -> Iterator[Any]:
    saved = {k: os.environ.get(k) for k in SPARK_ENV}
    os.environ.update(SPARK_ENV)
    from pyspark.sql import SparkSession

    from vdl.adapters.spark import register

    workdir.mkdir(parents=True, exist_ok=True)
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("vdl-spark-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.memory", "1g")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.local.dir", str(workdir / "local"))
        .config("spark.sql.warehouse.dir", str(workdir / "warehouse"))
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    try:
        yield spark
    finally:
        for query in spark.streams.active:
            query.stop()
        _stop_everything(spark)
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _stop_everything(spark: Any) -> None:
    from pyspark import SparkContext

    gateway = SparkContext._gateway
    spark.stop()
    if gateway is None:
        return
    process = getattr(gateway, "proc", None)
    gateway.shutdown()
    SparkContext._gateway = None
    SparkContext._jvm = None
    if process is not None:
        # The JVM exits once its stdin (the gateway pipe) closes; wait so none is left behind.
        try:
            process.stdin.close()
        except (OSError, AttributeError):
            pass
        try:
            process.wait(30)
        except Exception:
            process.kill()
            process.wait(30)
