"""Opens a log or metadata store by backend name, so the backend is a configuration choice."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from vdl.backends.api import LogStore, LogStoreOptions, MetaStore

LogBackend = Literal["segment", "rocks"]
LOG_BACKENDS: tuple[LogBackend, ...] = ("segment", "rocks")


def open_log_store(kind: LogBackend, directory: Path, options: LogStoreOptions) -> LogStore:
    """Open (creating if needed) the log store of one log stream kept in `directory`."""
    if kind == "segment":
        from vdl.backends.segment.store import SegmentLogStore

        return SegmentLogStore.open(directory, options)
    if kind == "rocks":
        from vdl.backends.rocks.log_store import RocksLogStore

        return RocksLogStore.open(directory, options)
    raise ValueError(f"unknown log backend {kind!r}; expected one of {LOG_BACKENDS}")


def open_meta_store(directory: Path) -> MetaStore:
    from vdl.backends.rocks.meta_store import RocksMetaStore

    return RocksMetaStore.open(directory)
