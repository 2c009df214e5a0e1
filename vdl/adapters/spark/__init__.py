"""Spark adapter: the ``vdl`` Python data source (PySpark >= 4.2, Java 17).

``register(spark)`` makes ``spark.read/readStream/write/writeStream.format("vdl")`` available
in a session. Where the package is installed as a wheel, the top-level module ``pyspark_vdl``
registers it automatically (PySpark imports every ``pyspark_*`` module it finds).
"""

from __future__ import annotations

from typing import Any

from vdl.adapters.spark.source import VdlDataSource

__all__ = ["VdlDataSource", "register"]


def register(spark: Any) -> None:
    """Register the ``vdl`` format in this SparkSession."""
    spark.dataSource.register(VdlDataSource)
