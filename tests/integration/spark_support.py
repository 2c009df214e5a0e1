"""A local SparkSession for the Spark adapter tests: started once per module, fully stopped.

Starting the JVM costs 6-9 s and the first query another ~10 s, so each test module shares one
session. Teardown stops the session *and* the py4j gateway JVM, so no JVM outlives its module.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

# Set before pyspark launches anything: the workers must run this interpreter (it has pyarrow,
# confluent-kafka and vdl), and loopback only.
_ENV = {"PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}


@contextmanager
def local_spark(workdir: Path) -> Iterator[Any]:
    saved = {k: os.environ.get(k) for k in _ENV}
    os.environ.update(_ENV)
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
