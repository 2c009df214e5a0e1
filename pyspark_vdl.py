"""Auto-registration hook: PySpark imports every top-level ``pyspark_*`` module on the Python
path and registers its ``DefaultSource``, so ``format("vdl")`` works without ``register()``."""

from vdl.adapters.spark.source import VdlDataSource as DefaultSource

__all__ = ["DefaultSource"]
